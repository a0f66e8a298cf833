// The console's only script: confirmations, "select all", live refresh of
// fragments the server renders (and escapes) itself, and relative times kept
// current. No HTML is built here.
"use strict";

document.addEventListener("submit", function (event) {
  var text = event.target.getAttribute("data-confirm");
  if (text && !window.confirm(text)) {
    event.preventDefault();
  }
});

document.addEventListener("change", function (event) {
  if (event.target.id === "select-all") {
    document.querySelectorAll("input[name=ids]").forEach(function (box) {
      box.checked = event.target.checked;
    });
  }
});

function live() {
  var box = document.getElementById("live");
  return !box || box.checked;
}

function refresh(element) {
  // A fragment is swapped in only when nothing in it is being used.
  if (!live() || element.contains(document.activeElement) ||
      element.querySelector("input:checked")) {
    return;
  }
  fetch(element.getAttribute("data-refresh"), {credentials: "same-origin"})
    .then(function (response) { return response.ok ? response.text() : null; })
    .then(function (html) {
      if (html !== null) {
        element.innerHTML = html;
      }
    })
    .catch(function () { /* the next tick tries again */ });
}

window.setInterval(function () {
  document.querySelectorAll("[data-refresh]").forEach(refresh);
}, 1500);

var page = document.querySelector("[data-refresh-page]");
if (page) {
  window.setTimeout(function () { window.location.reload(); },
                    Number(page.getAttribute("data-refresh-page")));
}

// Relative times ("3 min ago") stay current between refreshes, by the rules of
// web/humane.py's relative(), counted on the server's clock (the page's data-now),
// so a browser whose clock is off shows what the server would.
var served = Date.parse(document.documentElement.getAttribute("data-now") || "");
var skew = isNaN(served) ? 0 : served - Date.now();

function span(seconds) {
  if (seconds < 60) { return seconds + " s"; }
  if (seconds < 3600) { return Math.floor(seconds / 60) + " min"; }
  if (seconds < 86400) { return Math.floor(seconds / 3600) + " h"; }
  return Math.floor(seconds / 86400) + " d";
}

function relative(instant) {
  var delta = (Date.now() + skew - Date.parse(instant)) / 1000;
  var seconds = Math.floor(Math.abs(delta) + 0.5);
  if (isNaN(seconds)) { return null; }
  if (seconds < 1) { return "just now"; }
  return delta > 0 ? span(seconds) + " ago" : "in " + span(seconds);
}

window.setInterval(function () {
  document.querySelectorAll("time.rel[datetime]").forEach(function (element) {
    var text = relative(element.getAttribute("datetime"));
    if (text !== null && element.textContent !== text) {
      element.textContent = text;
    }
  });
}, 1000);
