// sqlcron dashboard: live updates. On each run that starts or ends anywhere in the cluster
// (server-sent events from the page's data-live address) the page's <main> is read again and
// replaced, unless the user is typing in it. Without this script every page still works.
(function () {
  "use strict";
  // The browser's zone, for pages that show times in it (zone.rs): kept in a cookie, and the
  // page read again once if it was drawn without it. The picker applies a choice at once.
  var picker = document.querySelector("form.zone");
  if (picker && window.Intl) {
    var zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
    var path = picker.getAttribute("action").replace(/\/zone$/, "") || "/";
    var wanted = "sqlcron_browser_zone=" + encodeURIComponent(zone);
    var known = function () { return document.cookie.split("; ").indexOf(wanted) >= 0; };
    if (zone && !known()) {
      document.cookie = wanted + "; path=" + path + "; SameSite=Strict; max-age=31536000";
      if (known() && picker.querySelector("select").value === "browser") window.location.reload();
    }
    picker.querySelector("select").addEventListener("change", function () { picker.submit(); });
  }
  var main = document.querySelector("main[data-live]");
  var status = document.getElementById("live");
  if (!main || !window.EventSource || !window.fetch) return;
  var source = new EventSource(main.getAttribute("data-live"));
  var waiting = false;
  function say(text) { if (status) { status.textContent = text; status.hidden = false; } }
  function refresh() {
    if (waiting) return;
    waiting = true;
    setTimeout(function () {
      fetch(window.location.href, { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (text) {
          waiting = false;
          if (!text) return;
          var focus = document.activeElement;
          if (focus && main.contains(focus) && (focus.tagName === "INPUT" || focus.tagName === "SELECT")) return;
          var fresh = new DOMParser().parseFromString(text, "text/html").querySelector("main");
          if (!fresh) return;
          main.innerHTML = fresh.innerHTML;
          main.setAttribute("data-updated", String(Date.now()));
        })
        .catch(function () { waiting = false; });
    }, 300);
  }
  source.addEventListener("open", function () { say("live"); });
  source.addEventListener("error", function () { say("reconnecting…"); });
  source.addEventListener("run", refresh);
})();
