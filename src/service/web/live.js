// sqlcron dashboard: live updates. On each run that starts or ends anywhere in the cluster
// (server-sent events from the page's data-live address) the page's <main> is read again and
// the parts that changed are redrawn, unless the user is typing in it. The header's control
// sets how often (on each event, at most every 10, 30 or 60 s, or off), remembered in this
// browser. A hidden tab closes its stream and catches up when shown. A running run's page is
// read again every few seconds to follow its output. Without this script every page still works.
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
  var every = document.getElementById("live-every");
  if (!main || !window.EventSource || !window.fetch) return;
  var KEY = "sqlcron.live-every";
  var choice = "0";
  try { choice = window.localStorage.getItem(KEY) || "0"; } catch (e) { /* storage refused */ }
  // Only the menu's own values: anything else stored under the key (another page of the
  // same origin may write it) is ignored.
  if (["0", "10", "30", "60", "off"].indexOf(choice) < 0) choice = "0";
  if (every) {
    every.value = choice;
    every.hidden = false;
    every.addEventListener("change", function () {
      choice = every.value;
      try { window.localStorage.setItem(KEY, choice); } catch (e) { /* kept for this page */ }
      follow();
    });
  }
  var source = null;
  var waiting = false;
  var last = 0;
  var pending = null;
  function say(text) { if (status) { status.textContent = text; status.hidden = false; } }
  // A run event: read the page now (coalesced), or at the end of the chosen interval.
  // A page that asks something of the reader (a confirmation, a form to review) is never
  // redrawn under them: what it shows is what its button sends.
  function still() { return !!main.querySelector("[data-still]"); }
  function changed() {
    if (still()) return;
    var gap = choice === "off" ? null : Number(choice) * 1000;
    if (gap === null) return;
    var wait = Math.max(300, last + gap - Date.now());
    if (pending) return;
    pending = setTimeout(function () { pending = null; refresh(); }, wait);
  }
  function refresh() {
    if (waiting) return;
    waiting = true;
    last = Date.now();
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
        var follow = atEnd(output());
        patch(main, fresh);
        if (follow) toEnd();
        main.setAttribute("data-updated", String(Date.now()));
      })
      .catch(function () { waiting = false; });
  }
  // Redraws only what differs: children compared in order, the same element kept when equal,
  // descended into when only its content differs, replaced otherwise.
  function patch(old, fresh) {
    var a = old.childNodes, b = fresh.childNodes;
    if (a.length !== b.length) {
      while (old.firstChild) old.removeChild(old.firstChild);
      while (fresh.firstChild) old.appendChild(fresh.firstChild);
      return;
    }
    var pairs = [];
    for (var i = 0; i < a.length; i++) pairs.push([a[i], b[i]]);
    pairs.forEach(function (p) {
      var x = p[0], y = p[1];
      if (x.isEqualNode(y)) return;
      if (x.nodeType === 1 && y.nodeType === 1 && x.tagName === y.tagName && sameAttributes(x, y)) {
        patch(x, y);
      } else {
        old.replaceChild(document.importNode(y, true), x);
      }
    });
  }
  function sameAttributes(x, y) {
    if (x.attributes.length !== y.attributes.length) return false;
    for (var i = 0; i < x.attributes.length; i++) {
      var at = x.attributes[i];
      if (y.getAttribute(at.name) !== at.value) return false;
    }
    return true;
  }
  // A running run's page follows its output: read again every data-follow seconds, the
  // output kept scrolled to its end unless the reader scrolled up.
  function output() { return main.querySelector("pre.output"); }
  function atEnd(pre) { return !pre || pre.scrollHeight - pre.scrollTop - pre.clientHeight < 8; }
  function toEnd() { var pre = output(); if (pre) pre.scrollTop = pre.scrollHeight; }
  toEnd();
  setInterval(function () {
    var f = main.querySelector("[data-follow]");
    if (!f || !source || choice === "off") return;
    // The run's own interval, or the reader's when that is longer.
    var gap = Math.max(1, Number(f.getAttribute("data-follow")) || 5, Number(choice)) * 1000;
    if (Date.now() - last >= gap && !pending) refresh();
  }, 1000);
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
  // One stream per shown page, and none while the choice is off or the tab is hidden. A page
  // the browser keeps in its back/forward cache closes its stream (pagehide) and opens it
  // again when shown (pageshow): kept pages holding their streams used up the browser's six
  // connections per host and the seventh page stalled.
  function open() {
    if (source) return;
    source = new EventSource(main.getAttribute("data-live"));
    main.setAttribute("data-stream", "open");
    source.addEventListener("open", function () { say("live"); });
    source.addEventListener("error", function () { say("reconnecting…"); });
    source.addEventListener("run", changed);
  }
  function close() {
    if (source) { source.close(); source = null; }
    if (pending) { clearTimeout(pending); pending = null; }
    main.setAttribute("data-stream", "closed");
  }
  function follow() {
    if (choice === "off") { close(); say("live: off"); return; }
    if (document.visibilityState === "hidden") { close(); return; }
    var was = source;
    open();
    if (!was) changed();
  }
  document.addEventListener("visibilitychange", follow);
  window.addEventListener("pagehide", close);
  window.addEventListener("pageshow", follow);
  if (choice === "off") { close(); say("live: off"); } else if (document.visibilityState !== "hidden") { open(); }
})();
