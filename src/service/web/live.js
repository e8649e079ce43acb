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
  var source = null;
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
          // What the user entered and has not sent (a search, ticked boxes) is never wiped:
          // the page is not replaced while any field differs from what the server drew.
          if (edited()) { say("live (paused: unsent changes on this page)"); return; }
          var fresh = new DOMParser().parseFromString(text, "text/html").querySelector("main");
          if (!fresh) return;
          main.innerHTML = fresh.innerHTML;
          main.setAttribute("data-updated", String(Date.now()));
        })
        .catch(function () { waiting = false; });
    }, 300);
  }
  function edited() {
    var fields = main.querySelectorAll("input, select, textarea");
    for (var i = 0; i < fields.length; i++) {
      var f = fields[i];
      if (f.type === "checkbox" || f.type === "radio") {
        if (f.checked !== f.defaultChecked) return true;
      } else if (f.tagName === "SELECT") {
        for (var k = 0; k < f.options.length; k++) {
          if (f.options[k].selected !== f.options[k].defaultSelected) return true;
        }
      } else if (f.type !== "hidden" && f.value !== f.defaultValue) {
        return true;
      }
    }
    return false;
  }
  // One stream per shown page. A page the browser keeps in its back/forward cache closes its
  // stream (pagehide) and opens it again when shown (pageshow): kept pages holding their
  // streams used up the browser's six connections per host and the seventh page stalled.
  function open() {
    if (source) return;
    source = new EventSource(main.getAttribute("data-live"));
    source.addEventListener("open", function () { say("live"); });
    source.addEventListener("error", function () { say("reconnecting…"); });
    source.addEventListener("run", refresh);
  }
  function close() {
    if (source) { source.close(); source = null; }
  }
  window.addEventListener("pagehide", close);
  window.addEventListener("pageshow", open);
  open();
})();
