// A small line chart for the allocation page's usage cards: an SVG path of the last values,
// scaled to the largest of them (or to `max`, a reservation say). No library: one path and
// its shaded area, sized by the stylesheet (.spark).

/** A line chart of the last values (an SVG path), with the latest value in its label. */
export function sparkline(values, { max, label } = {}) {
  const w = 300, hgt = 48;
  const top = Math.max(max || 0, ...values, 1e-9);
  const pts = values.map((v, i) => [values.length > 1 ? (i * w) / (values.length - 1) : w, hgt - (v / top) * (hgt - 2) - 1]);
  const d = pts.map((p, i) => `${i ? "L" : "M"}${p[0].toFixed(1)},${p[1].toFixed(1)}`).join(" ");
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${hgt}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("class", "spark");
  svg.setAttribute("role", "img");
  if (label) svg.setAttribute("aria-label", label);
  if (pts.length) {
    const area = document.createElementNS(ns, "path");
    area.setAttribute("class", "area");
    area.setAttribute("d", `${d} L${w},${hgt} L${pts[0][0].toFixed(1)},${hgt} Z`);
    const line = document.createElementNS(ns, "path");
    line.setAttribute("class", "line");
    line.setAttribute("d", d);
    svg.append(area, line);
  }
  return svg;
}
