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
    /* Jobs finished per day (stacked) and the start lag's p95 (line), from the rollups. */
    history: function (registry, id, h) {
      var c = this.colors;
      return this.make(registry, id, {
        type: "bar",
        data: {
          labels: h.days.map(function (d) { return d.slice(5); }),
          datasets: [
            { label: "succeeded", data: h.succeeded, backgroundColor: c.ok, stack: "s", yAxisID: "y" },
            { label: "failed", data: h.failed, backgroundColor: c.bad, stack: "s", yAxisID: "y" },
            { label: "cancelled", data: h.cancelled, backgroundColor: c.idle, stack: "s", yAxisID: "y" },
            { label: "start lag p95 (ms)", type: "line", data: h.lag_p95_ms, borderColor: c.warn,
              backgroundColor: c.warn, yAxisID: "y1", pointRadius: 1, spanGaps: true },
          ],
        },
        options: { scales: {
          x: { ticks: { maxTicksLimit: 15 } },
          y: { beginAtZero: true, title: { display: true, text: "jobs / day" } },
          y1: { beginAtZero: true, position: "right", grid: { drawOnChartArea: false }, title: { display: true, text: "lag p95 (ms)" } },
        } },
      });
    },
  };
})();
