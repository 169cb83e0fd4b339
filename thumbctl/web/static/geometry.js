// The crop window a fix gives: a port of thumbctl/imaging/window.py (fixed_window, focus_at) and of
// the geometry it uses (imaging/crop.py: output_geometry's window, focus_box). Tested against the
// Python over a table of cases (tests/test_review_geometry.py), so the preview is the render's window.

// Python's round(): halves go to the even neighbour.
export function pyRound(x) {
  const floor = Math.floor(x);
  const diff = x - floor;
  if (diff > 0.5) return floor + 1;
  if (diff < 0.5) return floor;
  return floor % 2 === 0 ? floor : floor + 1;
}

export function parseRatio(text) {
  const [w, h] = text.split(":").map(Number);
  return [w, h];
}

// The largest window of ratio rw:rh inside a width x height photo.
export function windowSize(width, height, rw, rh) {
  if (width * rh >= height * rw) {
    return [Math.max(1, Math.min(width, pyRound((height * rw) / rh))), height];
  }
  return [width, Math.max(1, Math.min(height, pyRound((width * rh) / rw)))];
}

function focusBox(width, height, cropW, cropH, fx, fy) {
  const left = Math.min(Math.max(pyRound(fx * width - cropW / 2), 0), width - cropW);
  const top = Math.min(Math.max(pyRound(fy * height - cropH / 2), 0), height - cropH);
  return [left, top, left + cropW, top + cropH];
}

// fixed_window: the box [left, top, right, bottom] an output of `ratio` ("4:3") shows with the fix
// `focus` ([x, y], 0..1 each, inside `trim` when given).
export function fixedWindow(srcW, srcH, ratio, fit, trim, focus) {
  if (fit === "contain") return trim ? [...trim] : [0, 0, srcW, srcH];
  const [left, top, right, bottom] = trim || [0, 0, srcW, srcH];
  const width = right - left;
  const height = bottom - top;
  const [rw, rh] = parseRatio(ratio);
  const [cropW, cropH] = windowSize(width, height, rw, rh);
  const [x0, y0, x1, y1] = focusBox(width, height, cropW, cropH, focus[0], focus[1]);
  return [x0 + left, y0 + top, x1 + left, y1 + top];
}

function inside(value) {
  return pyRound(Math.min(1, Math.max(0, value)) * 10000) / 10000;
}

// focus_at: the focus that centres a window on `point` ([x, y], 0..1 of the photo).
export function focusAt(point, srcW, srcH, trim) {
  if (!trim) return [inside(point[0]), inside(point[1])];
  const [left, top, right, bottom] = trim;
  const x = (point[0] * srcW - left) / Math.max(1, right - left);
  const y = (point[1] * srcH - top) / Math.max(1, bottom - top);
  return [inside(x), inside(y)];
}
