/* Overview: draws the charts from the page's JSON, then refreshes the live part every
   10 s by fetching the same page and swapping it in (one rendering path: the server's). */
(function () {
  var T = window.TempoCharts, charts = {}, paused = false, REFRESH_MS = 10000;

  function draw() {
    var data = T.read("overview-data");
    if (!data) return;
    T.make(charts, "throughput-chart", {
      type: "bar",
      data: {
        labels: data.throughput.minutes,
        datasets: [
          { label: "succeeded", data: data.throughput.succeeded, backgroundColor: T.colors.ok, stack: "s" },
          { label: "failed", data: data.throughput.failed, backgroundColor: T.colors.bad, stack: "s" },
        ],
      },
      options: { scales: { x: { ticks: { maxTicksLimit: 12 } }, y: { beginAtZero: true, title: { display: true, text: "jobs / min" } } } },
    });
    T.history(charts, "history-chart", data.history);
    if (data.cost.length) {
      T.make(charts, "cost-chart", {
        type: "bar",
        data: {
          labels: data.cost.map(function (c) { return c.hour; }),
          datasets: [
            { label: "cost score", data: data.cost.map(function (c) { return c.cost; }), backgroundColor: T.colors.accent, yAxisID: "y" },
            { label: "DB statements per job", type: "line", data: data.cost.map(function (c) { return c.statements_per_job; }),
              borderColor: T.colors.warn, backgroundColor: T.colors.warn, yAxisID: "y1", pointRadius: 2 },
          ],
        },
        options: { scales: {
          y: { beginAtZero: true, title: { display: true, text: "cost score" } },
          y1: { beginAtZero: true, position: "right", grid: { drawOnChartArea: false }, title: { display: true, text: "statements / job" } },
        } },
      });
    }
  }

  function refresh() {
    if (paused || document.hidden) return;
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("live");
        if (!fresh) throw new Error("no live part");
        // Sections the reader opened (details with an id) stay open after the swap.
        document.querySelectorAll("#live details[id][open]").forEach(function (open) {
          var again = fresh.querySelector("details#" + open.id);
          if (again) again.open = true;
        });
        document.getElementById("live").replaceWith(fresh);
        var data = T.read("overview-data");
        document.getElementById("updated").textContent = data.now.slice(11, 19);
        document.getElementById("refresh-dot").className = "dot live";
        draw();
      })
      .catch(function () { document.getElementById("refresh-dot").className = "dot down"; });
  }

  draw();
  setInterval(refresh, REFRESH_MS);
  var toggle = document.getElementById("refresh-toggle");
  toggle.addEventListener("click", function () {
    paused = !paused;
    toggle.textContent = paused ? "Resume" : "Pause";
    document.getElementById("refresh-dot").className = paused ? "dot" : "dot live";
  });
})();
