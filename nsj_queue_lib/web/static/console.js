// The console's only script: confirmations, "select all", and live refresh of
// fragments the server renders (and escapes) itself. No HTML is built here.
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
