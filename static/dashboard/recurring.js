/* A recurring task's period: the slice strip (canvas), members per slice against the even
   share, and the load of planned jobs over the period. */
(function () {
  var T = window.TempoCharts, charts = {}, data = T.read("plan-data");
  if (!data) return;

  function drawStrip() {
    var canvas = document.getElementById("strip");
    var ratio = window.devicePixelRatio || 1, width = canvas.clientWidth, height = canvas.clientHeight;
    canvas.width = width * ratio; canvas.height = height * ratio;
    var ctx = canvas.getContext("2d");
    ctx.scale(ratio, ratio);
    var start = Date.parse(data.period_start), end = Date.parse(data.period_end), now = Date.parse(data.now);
    var n = data.slices.length, bar = 30, top = 4, gap = n > 150 ? 0 : 1;
    function x(index) { return (index / n) * width; }
    data.slices.forEach(function (s) {
      ctx.fillStyle = s.planned ? "#2f6fde" : "#d3d9e2";
      ctx.fillRect(x(s.index), top, Math.max(x(s.index + 1) - x(s.index) - gap, 0.5), bar);
    });
    data.slices.forEach(function (s) {
      if (!s.current) return;
      ctx.strokeStyle = "#d97706"; ctx.lineWidth = 3;
      ctx.strokeRect(x(s.index) + 1.5, top - 1.5 + 1, Math.max(x(s.index + 1) - x(s.index) - 3, 2), bar + 1);
    });
    if (now >= start && now < end) {
      var nx = ((now - start) / (end - start)) * width;
      ctx.fillStyle = "#d64545"; ctx.fillRect(nx - 1, 0, 2, bar + 8);
    }
    ctx.fillStyle = "#667085"; ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "top";
    var marks = Math.min(n, 8);
    for (var i = 0; i <= marks; i++) {
      var t = new Date(start + ((end - start) * i) / marks);
      var label = t.toISOString().slice(5, 16).replace("T", " ");
      ctx.textAlign = i === 0 ? "left" : i === marks ? "right" : "center";
      ctx.fillText(label, (i / marks) * width, bar + 12);
    }
  }

  function drawCharts() {
    var labels = data.slices.map(function (s) { return s.index; });
    T.make(charts, "members-chart", {
      type: "bar",
      data: {
        labels: labels,
        datasets: [
          { label: "members now", data: data.slices.map(function (s) { return s.members; }),
            backgroundColor: data.slices.map(function (s) { return s.current ? "#d97706" : s.planned ? "#2f6fde" : "#aab4c3"; }), order: 2 },
          { label: "even share", type: "line", data: data.slices.map(function (s) { return s.expected; }),
            borderColor: "#d64545", borderDash: [5, 4], pointRadius: 0, borderWidth: 2, order: 1 },
        ],
      },
      options: { scales: { x: { title: { display: true, text: "slice" }, ticks: { maxTicksLimit: 24 } }, y: { beginAtZero: true } } },
    });
    // The mean of the parts in planned slices only, drawn over those (the server's).
    var counts = data.load.counts, planned = data.load.planned || [], mean = data.load.mean;
    T.make(charts, "load-chart", {
      type: "line",
      data: {
        labels: data.load.labels,
        datasets: [
          { label: "jobs due", data: counts, borderColor: "#2f6fde", backgroundColor: "rgba(47,111,222,.15)", fill: true, pointRadius: 0, stepped: true },
          { label: "mean of the planned slices", data: counts.map(function (_, i) { return mean !== null && planned[i] ? mean : null; }), borderColor: "#d64545", borderDash: [5, 4], pointRadius: 0, borderWidth: 2 },
        ],
      },
      options: { scales: { x: { ticks: { maxTicksLimit: 8 } }, y: { beginAtZero: true, title: { display: true, text: "jobs per part" } } } },
    });
  }

  drawStrip();
  drawCharts();
  T.history(charts, "history-chart", data.history);
  window.addEventListener("resize", drawStrip);
})();
