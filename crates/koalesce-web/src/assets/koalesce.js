// koalesce: the dashboard's only script (plain JavaScript, no build step, no dependency).
//
// 1. Live regions. An element with data-live="URL" opens a server-sent event stream at URL.
//    An event named "swap" carries a target element id on its first data line and the
//    element's new HTML on the following lines: the element with that id is replaced.
//    An event named "reload" reloads the page. The element with data-live-status (if any)
//    gets the class "on" while the stream is open.
// 2. Forms with data-confirm="question" ask before they are submitted.
// 3. Elements with data-ms="UNIX_MS" show that instant in the browser's time zone.
(function () {
  "use strict";

  function swap(data) {
    var nl = data.indexOf("\n");
    if (nl < 0) return;
    var id = data.slice(0, nl);
    var target = document.getElementById(id);
    if (!target) return;
    var tpl = document.createElement("template");
    tpl.innerHTML = data.slice(nl + 1);
    var next = tpl.content.firstElementChild;
    if (!next) return;
    target.replaceWith(next);
    localTimes(next);
    document.dispatchEvent(new CustomEvent("koalesce:swapped", { detail: { id: id } }));
  }

  function live(el) {
    var url = el.getAttribute("data-live");
    var status = document.querySelector("[data-live-status]");
    var source = new EventSource(url, { withCredentials: true });
    source.addEventListener("open", function () { if (status) status.classList.add("on"); });
    source.addEventListener("error", function () { if (status) status.classList.remove("on"); });
    source.addEventListener("swap", function (e) { swap(e.data); });
    source.addEventListener("reload", function () { window.location.reload(); });
    window.addEventListener("pagehide", function () { source.close(); });
  }

  function localTimes(root) {
    var els = root.querySelectorAll ? root.querySelectorAll("[data-ms]") : [];
    Array.prototype.forEach.call(els, function (el) {
      var ms = Number(el.getAttribute("data-ms"));
      if (!isFinite(ms) || ms <= 0) return;
      el.textContent = new Date(ms).toLocaleString();
      el.setAttribute("title", new Date(ms).toISOString());
    });
  }

  document.addEventListener("submit", function (e) {
    var q = e.target.getAttribute && e.target.getAttribute("data-confirm");
    if (q && !window.confirm(q)) e.preventDefault();
  });

  function start() {
    Array.prototype.forEach.call(document.querySelectorAll("[data-live]"), live);
    localTimes(document);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
