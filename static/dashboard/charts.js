/* Shared Chart.js defaults for the dashboard (Chart.js is vendored in static/vendor/). */
(function () {
  if (!window.Chart) return;
  Chart.defaults.font.family = 'system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
  Chart.defaults.font.size = 11;
  Chart.defaults.color = "#667085";
  Chart.defaults.animation = false;
  Chart.defaults.maintainAspectRatio = false;
  Chart.defaults.plugins.legend.labels.boxWidth = 12;
  window.TempoCharts = {
    colors: { ok: "#1f9d55", bad: "#d64545", accent: "#2f6fde", idle: "#c5ccd6", warn: "#d97706", violet: "#7c5cd6" },
    read: function (id) {
      var node = document.getElementById(id);
      return node ? JSON.parse(node.textContent) : null;
    },
    make: function (registry, id, config) {
      var canvas = document.getElementById(id);
      if (!canvas) return null;
      if (registry[id]) registry[id].destroy();
      registry[id] = new Chart(canvas, config);
      return registry[id];
    },
  };
})();
