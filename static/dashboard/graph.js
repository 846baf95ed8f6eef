// Live refresh of a running graph on the job page: every 2 s the graph section is fetched
// again (the server draws it) and replaced, until the graph has ended.
(function () {
  "use strict";
  const PERIOD_MS = 2000;

  function schedule() {
    const section = document.getElementById("graph");
    if (!section || section.dataset.done === "true") return;
    setTimeout(refresh, PERIOD_MS);
  }

  async function refresh() {
    const section = document.getElementById("graph");
    if (!section) return;
    try {
      const answer = await fetch(section.dataset.refresh, { credentials: "same-origin" });
      if (answer.ok) {
        const holder = document.createElement("div");
        holder.innerHTML = await answer.text();
        const fresh = holder.querySelector("#graph");
        const open = section.querySelector("details")?.open;
        if (fresh) {
          if (open && fresh.querySelector("details")) fresh.querySelector("details").open = true;
          section.replaceWith(fresh);
        }
      }
    } catch (error) {
      // the server is away for a moment: try again at the next period
    }
    schedule();
  }

  schedule();
})();
