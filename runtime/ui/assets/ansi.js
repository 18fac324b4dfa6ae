// ANSI colours (SGR escape codes) in task logs, rendered as coloured spans for the log view.
// A renderer keeps its colour state between chunks (a colour set in one frame carries over) and
// holds back an escape sequence cut at a chunk's end until the rest arrives. Text is always set
// as text; colours through the CSSOM (the page's CSP allows no inline style attribute).

const ANSI16 = ["#000000", "#cd3131", "#0dbc79", "#e5e510", "#2472c8", "#bc3fbc", "#11a8cd", "#e5e5e5",
  "#666666", "#f14c4c", "#23d18b", "#f5f543", "#3b8eea", "#d670d6", "#29b8db", "#ffffff"];

function color256(n) {
  if (n < 16) return ANSI16[n];
  if (n < 232) {
    const c = n - 16, v = (x) => (x ? x * 40 + 55 : 0);
    return `rgb(${v(Math.floor(c / 36))},${v(Math.floor(c / 6) % 6)},${v(c % 6)})`;
  }
  const g = (n - 232) * 10 + 8;
  return `rgb(${g},${g},${g})`;
}

/** A stateful renderer: feed(text) returns nodes; colours carry over between chunks. */
export function ansiRenderer() {
  let style = {};
  let pending = "";
  const apply = (codes) => {
    for (let i = 0; i < codes.length; i++) {
      const c = codes[i];
      if (c === 0) style = {};
      else if (c === 1) style.bold = true;
      else if (c === 2) style.dim = true;
      else if (c === 3) style.italic = true;
      else if (c === 4) style.underline = true;
      else if (c === 22) { style.bold = false; style.dim = false; }
      else if (c === 23) style.italic = false;
      else if (c === 24) style.underline = false;
      else if (c >= 30 && c <= 37) style.fg = ANSI16[c - 30];
      else if (c >= 90 && c <= 97) style.fg = ANSI16[c - 90 + 8];
      else if (c === 39) style.fg = null;
      else if (c >= 40 && c <= 47) style.bg = ANSI16[c - 40];
      else if (c >= 100 && c <= 107) style.bg = ANSI16[c - 100 + 8];
      else if (c === 49) style.bg = null;
      else if ((c === 38 || c === 48) && codes[i + 1] === 5) {
        style[c === 38 ? "fg" : "bg"] = color256(codes[i + 2] || 0); i += 2;
      } else if ((c === 38 || c === 48) && codes[i + 1] === 2) {
        style[c === 38 ? "fg" : "bg"] = `rgb(${codes[i + 2] || 0},${codes[i + 3] || 0},${codes[i + 4] || 0})`; i += 4;
      }
    }
  };
  const span = (text) => {
    if (!style.fg && !style.bg && !style.bold && !style.dim && !style.italic && !style.underline) {
      return document.createTextNode(text);
    }
    const el = document.createElement("span");
    el.textContent = text;
    const cls = ["bold", "dim", "italic", "underline"].filter((k) => style[k]).map((k) => "ansi-" + k);
    if (cls.length) el.className = cls.join(" ");
    if (style.fg) el.style.color = style.fg;
    if (style.bg) el.style.backgroundColor = style.bg;
    return el;
  };
  return {
    feed(text) {
      text = pending + text;
      pending = "";
      // An escape cut at the chunk's end waits for the rest.
      const cut = text.lastIndexOf("\x1b");
      if (cut !== -1 && !/^\x1b\[[0-9;]*[A-Za-z]/.test(text.slice(cut)) && text.length - cut < 32) {
        pending = text.slice(cut);
        text = text.slice(0, cut);
      }
      const nodes = [];
      const re = /\x1b\[([0-9;]*)([A-Za-z])/g;
      let last = 0, m;
      while ((m = re.exec(text))) {
        if (m.index > last) nodes.push(span(text.slice(last, m.index)));
        if (m[2] === "m") apply(m[1] === "" ? [0] : m[1].split(";").map((x) => parseInt(x, 10) || 0));
        last = re.lastIndex;
      }
      if (last < text.length) nodes.push(span(text.slice(last)));
      return nodes;
    },
  };
}
