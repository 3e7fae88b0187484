// The store view: a question before each action, and the overview reloaded while it is shown
// (not while a field of the filter form is being edited). No inline script: the page's
// Content-Security-Policy allows scripts from the server's own files only.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) {
        event.preventDefault();
      }
    });
  }
  const seconds = Number(document.body.dataset.refresh || 0);
  if (seconds > 0) {
    window.setInterval(() => {
      const active = document.activeElement;
      const editing = active && active.closest && active.closest("form");
      if (!editing && document.visibilityState !== "hidden") {
        window.location.reload();
      }
    }, seconds * 1000);
  }
});
