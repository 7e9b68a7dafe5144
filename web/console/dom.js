// Tiny DOM helpers: h() builds elements; nothing is ever parsed from strings as HTML.

export function h(tag, attrs = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      element.addEventListener(name.slice(2).toLowerCase(), value);
    } else if (name === "class") {
      element.className = value;
    } else if (name === "dataset") {
      Object.assign(element.dataset, value);
    } else if (name in element && typeof value !== "string") {
      element[name] = value;
    } else {
      element.setAttribute(name, value === true ? "" : value);
    }
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function replace(element, ...children) {
  element.replaceChildren();
  append(element, children);
}

const SVG_NS = "http://www.w3.org/2000/svg";

/** The brain of the memory toggle: two lobes and a few folds, in currentColor. */
export function brainIcon() {
  const svg = document.createElementNS(SVG_NS, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("focusable", "false");
  const paths = [
    "M12 5v14",
    "M12 5c-1.2-1.6-4.6-1.6-5.3.8-2.2.2-3.3 2.2-2.6 4-1.6 1.2-1.5 4 .2 5-.5 2.2 1.1 4.2 3.3 4 1 1.8 3.4 1.9 4.4.7",
    "M12 5c1.2-1.6 4.6-1.6 5.3.8 2.2.2 3.3 2.2 2.6 4 1.6 1.2 1.5 4-.2 5 .5 2.2-1.1 4.2-3.3 4-1 1.8-3.4 1.9-4.4.7",
    "M8.3 8.6c1 .2 1.8 1 2 2.1M6.6 13.2c1.2-.4 2.5 0 3.2 1",
    "M15.7 8.6c-1 .2-1.8 1-2 2.1M17.4 13.2c-1.2-.4-2.5 0-3.2 1",
  ];
  for (const d of paths) {
    const path = document.createElementNS(SVG_NS, "path");
    path.setAttribute("d", d);
    svg.append(path);
  }
  return svg;
}

export function formatTime(iso, withSeconds = false) {
  if (!iso) return "—";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return String(iso);
  return date.toLocaleString(undefined, {
    dateStyle: "medium",
    timeStyle: withSeconds ? "medium" : "short",
  });
}

export const shortId = (id) => (id ? String(id).slice(0, 8) : "—");

export const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

export function pretty(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}
