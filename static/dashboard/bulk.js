/* The job list's bulk actions: a box in the header that ticks (or clears) every row of
   the page. Without this script each row is ticked by hand; the server checks the
   ticked ids whichever way they came. */
(function () {
  "use strict";
  var cell = document.getElementById("tick-all-cell");
  if (!cell) return;
  var rows = function () { return document.querySelectorAll("#jobs input[name=ids]"); };
  var all = document.createElement("input");
  all.type = "checkbox";
  all.id = "tick-all";
  all.title = "Tick every row on this page";
  all.setAttribute("aria-label", all.title);
  cell.appendChild(all);
  all.addEventListener("change", function () {
    rows().forEach(function (box) { box.checked = all.checked; });
  });
  document.getElementById("jobs").addEventListener("change", function (event) {
    if (event.target.name !== "ids") return;
    var boxes = Array.prototype.slice.call(rows());
    all.checked = boxes.every(function (box) { return box.checked; });
    all.indeterminate = !all.checked && boxes.some(function (box) { return box.checked; });
  });
})();
