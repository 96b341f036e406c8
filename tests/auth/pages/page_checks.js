// Page checks run in the browser by tests/auth/pages/page_checks.py (see its docstring).
// Each check returns a list of problems; an empty list means the page passes.
function parse(c) {
  const m = /rgba?\(([^)]+)\)/.exec(c || "");
  if (!m) return null;
  const p = m[1].split(/[\s,\/]+/).filter(Boolean).map(Number);
  return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1};
}
function over(top, bottom) {
  return {r: top.r * top.a + bottom.r * (1 - top.a), g: top.g * top.a + bottom.g * (1 - top.a),
          b: top.b * top.a + bottom.b * (1 - top.a), a: 1};
}
function background(el) {
  const layers = [];
  for (let e = el; e; e = e.parentElement) {
    const c = parse(getComputedStyle(e).backgroundColor);
    if (c && c.a > 0) { layers.push(c); if (c.a >= 1) break; }
  }
  let out = {r: 255, g: 255, b: 255, a: 1};
  for (let i = layers.length - 1; i >= 0; i--) out = over(layers[i], out);
  return out;
}
function lum(c) {
  const f = v => { v /= 255; return v <= 0.04045 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
  return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b);
}
function ratio(a, b) {
  const x = lum(a), y = lum(b);
  return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05);
}
function shown(el) {
  const r = el.getBoundingClientRect();
  return r.width > 0 && r.height > 0 &&
    el.checkVisibility({opacityProperty: true, visibilityProperty: true});
}
function describe(el) {
  const text = (el.innerText || el.value || "").trim().slice(0, 40);
  return el.tagName.toLowerCase() + (el.className ? "." + String(el.className).split(" ").join(".") : "") +
    (text ? " '" + text + "'" : "");
}
function overflow(width) {
  const problems = [];
  const doc = document.documentElement;
  if (doc.scrollWidth > window.innerWidth || doc.scrollWidth > width)
    problems.push("page scrolls sideways: " + doc.scrollWidth + " px wide in " + window.innerWidth);
  for (const el of document.querySelectorAll("table, th, td, fieldset, .ws-list, .table-frame, dl, .actions, .button, input, label, p, h1, h2")) {
    if (!shown(el)) continue;
    const r = el.getBoundingClientRect();
    const card = el.closest(".card, .topbar, .footer");
    if (card) {
      const c = card.getBoundingClientRect();
      if (r.left < c.left - 0.5 || r.right > c.right + 0.5)
        problems.push(describe(el) + " outside its card: " + Math.round(r.left) + ".." + Math.round(r.right) +
                      " in " + Math.round(c.left) + ".." + Math.round(c.right));
    }
    if (r.right > width + 0.5) problems.push(describe(el) + " ends at " + Math.round(r.right));
  }
  for (const box of document.querySelectorAll(".ws-list, .table-frame")) {
    if (box.scrollWidth > box.clientWidth + 1)
      problems.push(describe(box) + " scrolls sideways: " + box.scrollWidth + " in " + box.clientWidth);
  }
  for (const th of document.querySelectorAll("thead th")) {
    if (!shown(th)) continue;
    const col = th.cellIndex;
    const table = th.closest("table");
    const cells = Array.from(table.tBodies[0].rows).map(r => r.cells[col]).filter(Boolean);
    if (cells.length && cells.every(c => !shown(c) || !(c.innerText.trim() || c.querySelector('input'))))
      problems.push("column '" + th.innerText.trim() + "' is shown with no value in any row");
  }
  return problems;
}
function contrast() {
  const problems = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const seen = new Set();
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!n.textContent.trim() || seen.has(el) || !shown(el)) continue;
    seen.add(el);
    const s = getComputedStyle(el);
    const bg = background(el);
    const fg = over(parse(s.color), bg);
    const size = parseFloat(s.fontSize), bold = parseInt(s.fontWeight, 10) >= 700;
    const need = size >= 24 || (size >= 18.66 && bold) ? 3 : 4.5;
    const got = ratio(fg, bg);
    if (got < need) problems.push("text " + describe(el) + ": " + got.toFixed(2) + " < " + need);
  }
  const controls = "input:not([type=hidden]):not([type=checkbox]):not([type=radio]), select, textarea, button, a.button, .segmented";
  for (const el of document.querySelectorAll(controls)) {
    if (!shown(el) || el.classList.contains("link")) continue;  // a text-only button: its text counts
    const s = getComputedStyle(el);
    const outside = background(el.parentElement);
    let best = 0;
    for (const side of ["Top", "Right", "Bottom", "Left"]) {
      if (parseFloat(s["border" + side + "Width"]) > 0 && s["border" + side + "Style"] !== "none")
        best = Math.max(best, ratio(over(parse(s["border" + side + "Color"]), outside), outside));
    }
    best = Math.max(best, ratio(background(el), outside));  // a filled button's edge is its fill
    if (best < 3) problems.push("control " + describe(el) + ": edge " + best.toFixed(2) + " < 3");
  }
  return problems;
}
function focused() {
  let el = document.activeElement;
  if (!el || el === document.body) return null;
  const name = describe(el);
  if (el.matches(".segmented input")) el = el.nextElementSibling;  // the visible part of the radio
  const s = getComputedStyle(el);
  const problems = [];
  const width = parseFloat(s.outlineWidth);
  if (s.outlineStyle === "none" || width < 2) problems.push("no focus outline: " + s.outlineStyle + " " + s.outlineWidth);
  else {
    const got = ratio(over(parse(s.outlineColor), background(el.parentElement)), background(el.parentElement));
    if (got < 3) problems.push("focus outline contrast " + got.toFixed(2));
  }
  if (!shown(el)) problems.push("focused element is not visible");
  return {name: name, problems: problems};
}
function labels() {
  const problems = [];
  for (const el of document.querySelectorAll("input:not([type=hidden]), select, textarea, button")) {
    const labelled = (el.labels && el.labels.length) || el.getAttribute("aria-label") ||
      (el.tagName === "BUTTON" && el.innerText.trim());
    if (!labelled) problems.push("no label: " + el.outerHTML.slice(0, 80));
  }
  return problems;
}
