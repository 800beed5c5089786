// Tollgate console: small behaviours of our own (no inline script anywhere; CSP forbids it).
"use strict";
document.addEventListener("submit", (ev) => {
  const f = ev.target;
  const q = f.getAttribute && f.getAttribute("data-confirm");
  if (q && !window.confirm(q)) ev.preventDefault();
});
document.addEventListener("DOMContentLoaded", () => {
  // The policy editor: put the caret at the line and column the API's error names.
  const t = document.querySelector("textarea[data-line]");
  if (!t) return;
  const line = Number(t.dataset.line), col = Number(t.dataset.column || 1);
  const lines = t.value.split("\n");
  let pos = 0;
  for (let i = 0; i < Math.min(line - 1, lines.length); i++) pos += lines[i].length + 1;
  pos += Math.max(0, col - 1);
  t.focus();
  t.setSelectionRange(pos, pos);
});
