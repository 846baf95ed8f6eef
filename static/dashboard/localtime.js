/* The reader's own time beside each UTC timestamp. The server writes every time in UTC,
   as <time datetime="…"> (the `when` and `clock` formats, tasksapp/web/templatetags/
   tempo.py); this adds the browser's local time on a small line below it ("09:03:07
   EST", with the local date in front when it is another day than in UTC) and the full
   local time in its title, and keeps the relative part the server marked (".rel",
   "· 3 min ago") current. Times swapped in later (the overview's refresh) get it too.
   A script file of the site's own, as the Content-Security-Policy wants (no inline code). */
(function () {
  "use strict";
  var zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "";
  var inUtc = /^(Etc\/)?(UTC|GMT|Zulu|UCT)$/.test(zone);
  var clock = new Intl.DateTimeFormat("en-US", {
    year: "numeric", month: "2-digit", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23",
    timeZoneName: "short",
  });
  var RELATIVE_MS = 15000;
  // A time alone in one of these gets its local time on a line below; in running text,
  // in brackets after it.
  var BLOCKS = ["TD", "LI", "DD", "DIV"];

  function localParts(date) {
    var parts = {};
    clock.formatToParts(date).forEach(function (p) { parts[p.type] = p.value; });
    return {
      day: parts.year + "-" + parts.month + "-" + parts.day,
      time: parts.hour + ":" + parts.minute + ":" + parts.second,
      zone: parts.timeZoneName,
    };
  }

  // The server's `age` filter: 4 s, 3 min, 2.0 h.
  function age(seconds) {
    if (seconds < 90) return Math.round(seconds) + " s";
    if (seconds < 5400) return Math.round(seconds / 60) + " min";
    return (seconds / 3600).toFixed(1) + " h";
  }

  function relative(date) {
    var seconds = (Date.now() - date.getTime()) / 1000;
    return "· " + (seconds < 0 ? "in " + age(-seconds) : age(seconds) + " ago");
  }

  function addLocal(element) {
    if (element.dataset.local) return;
    var date = new Date(element.getAttribute("datetime"));
    if (isNaN(date.getTime())) return;
    element.dataset.local = "1";
    var here = localParts(date);
    var utcDay = date.toISOString().slice(0, 10);
    element.title = (element.title ? element.title + " · " : "") +
      "your time (" + zone + "): " + here.day + " " + here.time + " " + here.zone;
    if (inUtc) return;
    var line = document.createElement("span");
    line.className = "sub local-time";
    line.textContent = (here.day !== utcDay ? here.day + " " : "") + here.time + " " + here.zone;
    line.title = "your time zone: " + zone;
    var parent = element.parentElement;
    if (parent && BLOCKS.indexOf(parent.tagName) >= 0) {
      line.style.display = "block";  // CSSOM, which the policy allows
    } else {
      line.textContent = " (" + line.textContent + ")";
    }
    element.after(line);
  }

  function refreshRelative(root) {
    root.querySelectorAll("time[datetime] .rel").forEach(function (span) {
      var date = new Date(span.parentElement.getAttribute("datetime"));
      if (!isNaN(date.getTime())) span.textContent = relative(date);
    });
  }

  function mark(root) {
    root.querySelectorAll("time[datetime]").forEach(addLocal);
  }

  mark(document);
  new MutationObserver(function (changes) {
    changes.forEach(function (change) {
      change.addedNodes.forEach(function (node) {
        if (node.nodeType !== 1) return;
        if (node.matches("time[datetime]")) addLocal(node); else mark(node);
      });
    });
  }).observe(document.body, { childList: true, subtree: true });
  setInterval(function () { refreshRelative(document); }, RELATIVE_MS);
})();
