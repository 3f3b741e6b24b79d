// zsched console: confirmations, local times, live overview. No dependencies, no build step.
// Everything user-controlled is written with textContent, never as HTML.
"use strict";
(function () {
  function localTimes(root) {
    root.querySelectorAll("time[data-local]").forEach(function (el) {
      if (el.dataset.done) return;
      var d = new Date(el.getAttribute("datetime"));
      if (isNaN(d)) return;
      el.dataset.done = "1";
      var span = document.createElement("span");
      span.className = "local";
      span.textContent = " / " + d.toLocaleString(undefined, {timeZoneName: "short"});
      el.after(span);
    });
  }

  document.addEventListener("submit", function (ev) {
    var btn = ev.submitter, form = ev.target;
    var msg = (btn && btn.dataset.confirm) || form.dataset.confirm;
    if (btn && btn.dataset.confirmSelected) {
      var n = form.querySelectorAll("input[name=entry_id]:checked").length;
      if (!n) { ev.preventDefault(); alert("Select at least one dead letter."); return; }
      msg = btn.dataset.confirmSelected.replace("{n}", String(n));
    }
    if (msg && !window.confirm(msg)) ev.preventDefault();
  });

  document.addEventListener("change", function (ev) {
    var all = ev.target;
    if (!all.matches || !all.matches("[data-select-all]")) return;
    all.form.querySelectorAll("input[name=entry_id]").forEach(function (b) { b.checked = all.checked; });
  });

  function age(ms) {
    var s = ms / 1000;
    if (s < 120) return s.toFixed(1) + "s";
    if (s < 7200) return Math.round(s / 60) + "min";
    return (s / 3600).toFixed(1) + "h";
  }

  function setText(root, key, text) {
    var el = root.querySelector('[data-k="' + key + '"]');
    if (el && el.textContent !== text) el.textContent = text;
  }

  function list(root, key, items, render) {
    var ul = root.querySelector('[data-k="' + key + '"]');
    if (!ul) return;
    ul.replaceChildren();
    if (!items.length) { var li = document.createElement("li"); li.textContent = "none"; ul.append(li); }
    items.forEach(function (it) { var li = document.createElement("li"); render(li, it); ul.append(li); });
  }

  function update(data) {
    data.queues.forEach(function (o) {
      var card = Array.prototype.find.call(document.querySelectorAll("section[data-queue]"),
        function (s) { return s.dataset.queue === o.queue; });
      if (!card) return;
      var v = card.querySelector('[data-k="verdict"]');
      v.textContent = o.verdict;
      v.className = "verdict " + (o.healthy ? "ok" : "bad");
      var pl = card.querySelector('[data-k="paused"]'), paused = o.partitions[0].paused;
      if (pl) pl.textContent = paused ? "Paused: " + paused : "Dispatching (not paused).";
      o.partitions.forEach(function (p) {
        card.querySelectorAll("[data-part]").forEach(function (row) {
          if (row.dataset.part !== p.name) return;
          ["delayed", "due", "ready", "pending", "dead", "rules"].forEach(function (k) { setText(row, k, String(p[k])); });
          setText(row, "oldest_due", age(p.oldest_due_age_ms));
          setText(row, "oldest_idle", age(p.oldest_pending_idle_ms));
          Object.keys(p.rates).forEach(function (k) {
            setText(row, "rate_" + k, p.rates[k] === null ? "-" : p.rates[k].toFixed(1));
          });
          list(row, "dispatchers", p.dispatchers, function (li, d) {
            li.textContent = d.name + ": heartbeat " + age(d.age_ms) + " ago";
          });
          setText(row, "entries", p.entries);
          list(row, "consumers", p.consumers, function (li, c) {
            li.textContent = c.name + ": " + c.pending + " running, last read " + age(c.idle_ms) + " ago" +
              (c.reads ? "" : ", reads plain entries only (did not register)");
          });
          list(row, "unreadable", p.unreadable, function (li, u) {
            var a = document.createElement("a");
            a.href = card.dataset.ruleHref + "?id=" + encodeURIComponent(u.schedule_id);
            a.textContent = u.schedule_id;
            li.append(a, ": " + u.reason);
          });
          list(row, "newest_ready", p.newest_ready, function (li, e) {
            var a = document.createElement("a");
            a.href = card.dataset.runHref + "?id=" + encodeURIComponent(e.run_id);
            a.textContent = e.run_id;
            li.append(a);
          });
        });
      });
    });
    var up = document.getElementById("updated");
    if (up) up.textContent = "updated " + new Date().toLocaleTimeString();
  }

  function poll(url) {
    fetch(url, {credentials: "same-origin", headers: {Accept: "application/json"}})
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(update)
      .catch(function (e) {
        var up = document.getElementById("updated");
        if (up) up.textContent = "live update failed (" + e + "); retrying";
      })
      .finally(function () { setTimeout(function () { poll(url); }, 2000); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    localTimes(document);
    var live = document.querySelector("[data-live]");
    if (live) setTimeout(function () { poll(live.dataset.live); }, 2000);
  });
})();
