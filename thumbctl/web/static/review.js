// The review page: the photos of an OUT, worst crop first; click or drag to fix a crop, Apply to
// render it again, Approve what is right. Every address is relative to the page's own (its token).
import { $, api, say } from "./api.js";
import { fixedWindow, focusAt } from "./geometry.js";

const PAGE = 40;

const state = {
  photos: [], total: 0, ratios: [], colours: {}, index: -1, photo: null,
  pending: new Map(), undo: new Map(), running: null,
  target: "", // the ratio a click or a drag fixes ("": all), kept from photo to photo
  listing: 0, // which listing the list shows: one more each time the filters change
  loading: null, // the listing whose next page is being read
};

// Each ratio's colour, as the catalogue's contact sheet draws it (the listing sends them).
function colour(ratio) {
  return state.colours[ratio] || "#e11d48";
}

// The low-score threshold as typed (an empty field: the default, 0.5).
function threshold() {
  const typed = $("below").value.trim();
  return typed === "" ? 0.5 : Number(typed);
}

function query(offset) {
  const below = threshold();
  const params = new URLSearchParams({
    shown: $("shown").value, ratio: $("ratio-filter").value, below: String(Number.isFinite(below) ? below : 0.5),
    offset: String(offset), limit: String(PAGE),
  });
  return `api/photos?${params}`;
}

async function loadList(first = null) {
  const listing = ++state.listing;
  state.photos = []; state.total = 0; state.index = -1;
  $("photos").replaceChildren();
  const answered = await loadMore(first);
  if (listing !== state.listing) return; // the filters changed again meanwhile
  if (answered) say(""); // a message about the filters before is answered
  if (state.photos.length) await select(0, false); else showNothing();
}

// The next page of the listing; `given`: the first page, sent with the page itself.
async function loadMore(given = null) {
  const listing = state.listing;
  if (state.loading === listing || (state.photos.length && state.photos.length >= state.total)) return;
  state.loading = listing;
  let answered = false;
  try {
    const page = given || await api(query(state.photos.length));
    if (listing !== state.listing) return; // an answer for filters no longer chosen
    $("out").textContent = page.out;
    if (!state.ratios.length) fillRatios(page.ratios, page.colours);
    state.total = page.total;
    for (const photo of page.photos) addToList(photo);
    $("count").textContent = `${page.total} of ${page.photos_in_out} photos`;
    $("more").textContent = state.photos.length < state.total ? "More photos load as you scroll…" : "";
    answered = true;
  } catch (error) {
    say(error.message);
    if (!state.photos.length) $("count").textContent = "";
  } finally {
    if (state.loading === listing) state.loading = null;
  }
  if (listing === state.listing && moreInSight()) loadMore(); // a tall list shows the end of this page already
  return answered;
}

function moreInSight() {
  const more = $("more").getBoundingClientRect();
  return state.photos.length < state.total && more.top <= $("list").getBoundingClientRect().bottom;
}

function fillRatios(ratios, colours) {
  state.ratios = ratios;
  state.colours = colours;
  for (const ratio of ratios) $("ratio-filter").append(new Option(ratio, ratio));
}

// A score to two places, rounded down: one below the threshold never reads as the threshold.
function scoreText(score) {
  return score === null ? "unknown" : (Math.floor(score * 100 + 1e-9) / 100).toFixed(2); // as core/display.py
}

// The score the list shows: the worst of the photo's ratios, or of the ratio the list filters on.
function listedScore(photo) {
  const only = $("ratio-filter").value;
  if (!only) return photo.score;
  const ratio = photo.ratios.find((r) => r.ratio === only);
  return ratio ? ratio.score : null;
}

function low(score) {
  return score !== null && score < threshold();
}

function addToList(photo) {
  const at = state.photos.push(photo) - 1;
  const item = document.createElement("li");
  item.dataset.id = photo.id;
  const image = document.createElement("img");
  image.loading = "lazy"; image.alt = "";
  if (photo.preview) image.src = `img/${photo.id}/preview`;
  const name = document.createElement("span");
  name.className = "name"; name.textContent = photo.source; name.title = photo.source;
  const score = document.createElement("span");
  item.append(image, name, score);
  item.addEventListener("click", () => select(at));
  $("photos").append(item);
  markListItem(at);
}

function markListItem(at) {
  const photo = state.photos[at];
  const item = $("photos").children[at];
  if (!item) return;
  const score = item.lastChild;
  const shown = listedScore(photo);
  score.textContent = photo.changed ? scoreText(shown) : `✓ ${scoreText(shown)}`;
  score.className = `score${low(shown) ? " low" : ""}${photo.changed ? "" : " reviewed"}`;
  item.classList.toggle("current", at === state.index);
}

function showNothing() {
  $("photo").hidden = true;
  $("empty").hidden = false;
  $("empty").textContent = "No photo matches these filters.";
}

async function select(at, again = true) { // again: ask for the photo as it is now (not just listed)
  if (at < 0 || at >= state.total) return;
  while (at >= state.photos.length && state.photos.length < state.total) await loadMore();
  if (!state.photos[at]) return;
  if (state.pending.size && at !== state.index) say("Changes not applied were discarded", "info");
  const before = state.index;
  state.index = at; state.pending.clear();
  if (!state.pending.size) say("");
  if (!state.running) $("progress").textContent = "";
  markListItem(before); markListItem(at);
  $("photos").children[at].scrollIntoView({ block: "nearest" });
  show(state.photos[at]);
  if (again) await refresh();
}

async function refresh() {
  const wanted = state.photos[state.index];
  try {
    const photo = await api(`api/photos/${wanted.id}`);
    const shown = state.photos[state.index];
    // still the photo shown (another refresh may have replaced it meanwhile); redrawn only when it changed
    if (shown && shown.id === photo.id && JSON.stringify(photo) !== JSON.stringify(shown)) update(photo);
  } catch (error) {
    say(error.message);
  }
}

function update(photo) {
  state.photos[state.index] = photo;
  markListItem(state.index);
  show(photo);
}

function show(photo) {
  state.photo = photo;
  $("empty").hidden = true;
  $("photo").hidden = false;
  $("title").textContent = photo.source;
  const reviewed = photo.reviewed_at ? `approved ${photo.reviewed_at.slice(0, 16).replace("T", " ")}` : "not approved yet";
  $("facts").textContent = `${photo.width}×${photo.height} px · worst score ${scoreText(photo.score)} · ${reviewed}` +
    (photo.changed && photo.reviewed_at ? " · changed since" : "");
  const source = $("source");
  source.hidden = false;
  if (photo.preview) source.src = `img/${photo.id}/preview`; else source.removeAttribute("src");
  sizeStage();
  const targets = $("targets");
  const chosen = state.target;
  targets.replaceChildren();
  for (const ratio of photo.ratios.filter((r) => r.fit === "cover")) {
    const label = document.createElement("label");
    const input = document.createElement("input");
    input.type = "radio"; input.name = "target"; input.value = ratio.ratio; input.checked = chosen === ratio.ratio;
    label.append(input, ` ${ratio.ratio}`);
    targets.append(label);
  }
  if (!document.querySelector("input[name=target]:checked")) document.querySelector("input[name=target]").checked = true;
  draw();
}

// The photo as large as the page lets it be, beside its crops.
function sizeStage() {
  const photo = state.photo;
  const wide = Math.max(240, Math.min(560, $("detail").clientWidth - 420));
  const high = Math.max(240, window.innerHeight - 250);
  const fit = Math.min(wide / photo.width, high / photo.height);
  $("source").style.width = `${Math.round(photo.width * fit)}px`;
  $("source").style.height = `${Math.round(photo.height * fit)}px`;
}

// The window each ratio shows: the pending fix's (computed here, as the render will), else the rendered one.
function windowOf(ratio) {
  const photo = state.photo;
  if (state.pending.has(ratio.ratio)) {
    const focus = state.pending.get(ratio.ratio);
    if (focus === null) return ratio.policy === "focus" ? null : ratio.window;
    return fixedWindow(photo.width, photo.height, ratio.ratio, ratio.fit, photo.trim, focus);
  }
  if (!ratio.rendered) {
    // a fix applied, its render not finished (or cancelled): the window it will have; the smart
    // crop's is known only once rendered
    return ratio.focus ? fixedWindow(photo.width, photo.height, ratio.ratio, ratio.fit, photo.trim, ratio.focus) : null;
  }
  return ratio.window;
}

// Where each ratio's label sits on its window, in turn: windows that share an edge keep them apart.
const CORNERS = ["top-left", "bottom-right", "top-right", "bottom-left"];

function scale() {
  const shown = $("source").getBoundingClientRect();
  return shown.width / state.photo.width;
}

function draw() {
  const photo = state.photo;
  const by = scale() || 560 / photo.width;
  const windows = $("windows");
  const moving = new Set(targets().map((ratio) => ratio.ratio));
  windows.replaceChildren();
  for (const [index, ratio] of photo.ratios.entries()) {
    if (ratio.fit !== "cover") continue;
    const box = windowOf(ratio);
    if (!box) continue;
    const div = document.createElement("div");
    const movable = moving.has(ratio.ratio) ? " movable" : "";
    div.className = `window${state.pending.has(ratio.ratio) ? " pending" : ""}${movable}`;
    div.dataset.ratio = ratio.ratio;
    div.dataset.box = box.join(",");
    Object.assign(div.style, {
      left: `${box[0] * by}px`, top: `${box[1] * by}px`,
      width: `${(box[2] - box[0]) * by}px`, height: `${(box[3] - box[1]) * by}px`, borderColor: colour(ratio.ratio),
    });
    const label = document.createElement("span");
    label.style.background = colour(ratio.ratio);
    label.className = CORNERS[index % CORNERS.length];
    label.textContent = ratio.ratio;
    div.append(label);
    windows.append(div);
  }
  drawMark(by);
  drawCrops();
  const changed = state.pending.size > 0;
  $("apply").disabled = !Object.keys(wanted()).length || state.running !== null;
  $("discard").disabled = !changed;
  $("undo").disabled = !(state.undo.get(photo.id) || []).length || state.running !== null;
}

function drawMark(by) {
  const target = document.querySelector("input[name=target]:checked").value;
  const ratio = state.photo.ratios.find((r) => r.ratio === target && r.fit === "cover")
    || state.photo.ratios.find((r) => r.fit === "cover");
  const box = ratio && windowOf(ratio);
  const mark = $("mark");
  mark.hidden = !box || !(state.pending.get(ratio.ratio) || ratio.focus);
  if (mark.hidden) return;
  mark.style.left = `${((box[0] + box[2]) / 2) * by}px`;
  mark.style.top = `${((box[1] + box[3]) / 2) * by}px`;
}

function largestName(ratio) {
  const names = ratio.names.filter((n) => n.width && n.height);
  const fitting = names.filter((n) => Math.max(n.width, n.height) <= 320);
  return (fitting.length ? fitting[fitting.length - 1] : names[0]) || ratio.names[0];
}

// The thumbnails the browser has loaded, and the one each photo's ratio showed last: a thumbnail
// rendered again is shown once it has loaded, the one before staying until then (no blank box).
const loaded = new Set();
const loading = new Set();
const lastShown = new Map();

function steadySrc(key, src) {
  const before = lastShown.get(key);
  if (!before || before === src || loaded.has(src)) {
    lastShown.set(key, src);
    loaded.add(src);
    return src;
  }
  if (!loading.has(src)) {
    loading.add(src);
    const next = new Image();
    next.src = src;
    next.decode().catch(() => {}).then(() => {
      loaded.add(src);
      if (state.photo) drawCrops();
    });
  }
  return before;
}

function drawCrops() {
  const photo = state.photo;
  const crops = $("crops");
  crops.replaceChildren();
  for (const ratio of photo.ratios) {
    const card = document.createElement("div");
    card.className = "crop";
    card.dataset.ratio = ratio.ratio;
    const head = document.createElement("h3");
    const swatch = document.createElement("i");
    swatch.style.background = colour(ratio.ratio);
    head.append(swatch, `${ratio.ratio} · ${framing(ratio)}`);
    const pair = document.createElement("div");
    pair.className = "pair";
    const name = largestName(ratio);
    const rendered = document.createElement("figure");
    const image = document.createElement("img");
    image.className = "rendered";
    image.alt = `${ratio.ratio} thumbnail as rendered`;
    const src = `img/${photo.id}/thumbnail?${new URLSearchParams({ name: name.name, v: name.version || "" })}`;
    image.src = steadySrc(`${photo.id} ${ratio.ratio}`, src);
    const [w, h] = [name.width || 160, name.height || 160];
    const fit = 160 / Math.max(w, h);
    image.width = Math.round(w * fit); image.height = Math.round(h * fit);
    const whole = document.createElement("a"); // the thumbnail at its own size, in a tab of its own
    whole.href = src; whole.target = "_blank"; whole.rel = "noopener"; whole.title = "Open at full size";
    whole.append(image);
    rendered.append(whole, caption(`as rendered · ${name.name}`));
    pair.append(rendered);
    if (ratio.fit === "cover" && state.pending.has(ratio.ratio)) pair.append(previewFigure(ratio, image.width, image.height));
    card.append(head, pair);
    crops.append(card);
  }
}

// How a ratio is framed now: the smart crop and its score, the fix, or the whole photo; and whether
// its thumbnails show it yet.
function framing(ratio) {
  if (ratio.fit !== "cover") return "the whole photo (contain)";
  const now = ratio.focus ? `your fix at ${ratio.focus.map((v) => v.toFixed(3)).join(", ")}` : "smart crop";
  if (!ratio.rendered) {
    if (ratio.rendering || (state.running && state.running.id === state.photo.id)) return `${now}, rendering…`;
    return `${now}, not rendered (its render was cancelled or failed): Apply renders it`;
  }
  return ratio.focus ? now : `${ratio.policy || "smart"} crop, score ${scoreText(ratio.score)}`;
}

function caption(text) {
  const figcaption = document.createElement("figcaption");
  figcaption.textContent = text;
  return figcaption;
}

// The crop the pending fix gives, drawn from the photo's preview before anything is rendered.
function previewFigure(ratio, width, height) {
  const photo = state.photo;
  const figure = document.createElement("figure");
  const box = windowOf(ratio);
  const div = document.createElement("div");
  div.className = "preview";
  div.setAttribute("role", "img");
  div.setAttribute("aria-label", `${ratio.ratio} preview of the fix`);
  div.style.width = `${width}px`; div.style.height = `${height}px`;
  if (box) {
    div.dataset.box = box.join(",");
    const by = width / (box[2] - box[0]);
    if (photo.preview) {
      div.style.backgroundImage = `url("img/${photo.id}/preview")`;
      div.style.backgroundSize = `${photo.width * by}px ${photo.height * by}px`;
      div.style.backgroundPosition = `${-box[0] * by}px ${-box[1] * by}px`;
    }
    figure.append(div, caption("after Apply"));
  } else {
    figure.append(div, caption("smart crop, chosen at Apply"));
  }
  return figure;
}

function targets() {
  const target = document.querySelector("input[name=target]:checked").value;
  const covers = state.photo.ratios.filter((r) => r.fit === "cover");
  return target ? covers.filter((r) => r.ratio === target) : covers;
}

let dragged = false;

function pointOf(event) {
  const shown = $("source").getBoundingClientRect();
  return [(event.clientX - shown.left) / shown.width, (event.clientY - shown.top) / shown.height];
}

function onStageClick(event) {
  if (dragged) { dragged = false; return; }
  if (!state.photo || state.running) return;
  const point = pointOf(event);
  if (point.some((v) => v < 0 || v > 1)) return;
  const photo = state.photo;
  for (const ratio of targets()) state.pending.set(ratio.ratio, focusAt(point, photo.width, photo.height, photo.trim));
  say("");
  draw();
}

// A press on the photo drags the window of the chosen ratio (with "all", the smallest one) under the
// pointer; a press elsewhere is a click, which sets the focus.
function onStagePress(event) {
  if (!state.photo || state.running || event.button !== 0) return;
  const point = pointOf(event);
  const [x, y] = [point[0] * state.photo.width, point[1] * state.photo.height];
  const under = targets()
    .map((ratio) => [ratio, windowOf(ratio)])
    .filter(([, box]) => box && box[0] <= x && x <= box[2] && box[1] <= y && y <= box[3])
    .sort(([, a], [, b]) => (a[2] - a[0]) * (a[3] - a[1]) - (b[2] - b[0]) * (b[3] - b[1]));
  if (under.length) startDrag(event, ...under[0]);
}

function startDrag(event, ratio, box) {
  event.preventDefault();
  event.stopPropagation();
  const photo = state.photo;
  const by = scale();
  const start = [event.clientX, event.clientY];
  const centre = [(box[0] + box[2]) / 2, (box[1] + box[3]) / 2];
  const move = (moved) => {
    const dx = (moved.clientX - start[0]) / by;
    const dy = (moved.clientY - start[1]) / by;
    if (Math.abs(dx) + Math.abs(dy) < 1) return;
    dragged = true;
    const point = [(centre[0] + dx) / photo.width, (centre[1] + dy) / photo.height];
    state.pending.set(ratio.ratio, focusAt(point, photo.width, photo.height, photo.trim));
    draw();
  };
  const stop = () => {
    window.removeEventListener("pointermove", move);
    window.removeEventListener("pointerup", stop);
    setTimeout(() => { dragged = false; }, 0);
  };
  window.addEventListener("pointermove", move);
  window.addEventListener("pointerup", stop);
}

// What Apply sends: the pending changes, else the fixes recorded and not rendered (their Apply was
// cancelled or failed), to render them now.
function wanted(photo = state.photo) {
  if (state.pending.size) return Object.fromEntries(state.pending);
  if (!photo || (state.running && state.running.id === photo.id)) return {};
  const waiting = photo.ratios.filter((r) => r.fit === "cover" && !r.rendered && !r.rendering);
  return Object.fromEntries(waiting.map((r) => [r.ratio, r.focus]));
}

async function apply(changes = wanted(), photo = state.photo, remember = state.pending.size > 0, verb = "Rendered") {
  if (!Object.keys(changes).length || state.running) return;
  state.running = { batches: [], id: photo.id }; // taken: a second press waits for this Apply
  $("apply").disabled = true;
  const previous = Object.fromEntries(Object.keys(changes).map((r) => [r, (photo.ratios.find((x) => x.ratio === r) || {}).focus || null]));
  $("progress").textContent = "Applying…";
  try {
    const applied = await api(`api/photos/${photo.id}/apply`, { version: photo.version, changes });
    if (remember) state.undo.set(photo.id, [...(state.undo.get(photo.id) || []), previous]);
    state.pending.clear();
    if (state.photo && state.photo.id === photo.id) update(applied.photo);
    const file = applied.fix_file;
    const problems = [...(file && file.problem ? [`fix file: ${file.problem}`] : []), ...(applied.problems || [])];
    const note = problems.length ? ` (${problems.join("; ")})` : "";
    await follow(applied.batches, applied.names, photo.id, note, verb);
  } catch (error) {
    state.running = null;
    $("progress").textContent = "";
    if (error.status === 409) {
      state.pending.clear();
      await refresh();
    }
    say(error.message);
    draw();
  }
}

async function follow(batches, names, id, note, verb) {
  state.running = { batches, id };
  $("cancel").hidden = false;
  draw();
  let views = [];
  for (;;) {
    try {
      views = await Promise.all(batches.map((b) => api(`api/batches/${b}`)));
    } catch (error) {
      say(error.message);
      break;
    }
    const done = views.reduce((n, v) => n + v.done, 0);
    $("progress").textContent = `Rendering ${done} of ${names} thumbnails…`;
    if (views.every((v) => ["succeeded", "partial", "failed", "cancelled"].includes(v.state))) break;
    await new Promise((resolve) => setTimeout(resolve, 300));
  }
  state.running = null;
  $("cancel").hidden = true;
  const failed = views.filter((v) => v.state !== "succeeded");
  if (state.photo && state.photo.id === id) await refresh();
  draw(); // a cancelled render changed nothing the refresh would redraw
  $("progress").textContent = failed.length ? trouble(failed) : `${verb} ${names} thumbnail${names === 1 ? "" : "s"}${note}`;
}

// What went wrong with an Apply's render: its state, the first failure's code and detail, where to look.
function trouble(batches) {
  const failure = batches.flatMap((v) => v.failures || [])[0];
  const why = failure ? ` (${failure.error_code}${failure.detail ? `: ${failure.detail}` : ""})` : "";
  return `Render ${batches.map((v) => v.state).join(", ")}${why}: your fix is recorded; ` +
    `thumbctl status ${batches[0].batch_id} says more`;
}

async function cancelRender() {
  if (!state.running) return;
  for (const batch of state.running.batches) {
    try { await api(`api/batches/${batch}/cancel`, {}); } catch (error) { say(error.message); }
  }
}

function reset() {
  if (!state.photo || state.running) return;
  let changed = false;
  for (const ratio of targets()) {
    if (ratio.focus) {
      state.pending.set(ratio.ratio, null);
      changed = true;
    } else if (state.pending.has(ratio.ratio)) {
      state.pending.delete(ratio.ratio);
      changed = true;
    }
  }
  say(changed ? "" : "Already the smart crop", "info");
  draw();
}

async function approve() {
  if (!state.photo) return;
  try {
    update(await api(`api/photos/${state.photo.id}/approve`, { version: state.photo.version }));
    say(`Approved ${state.photo.source}`, "info");
    if (state.index + 1 < state.total) await select(state.index + 1);
  } catch (error) {
    if (error.status === 409) await refresh();
    say(error.message);
  }
}

// Undo the last Apply of the photo shown (each photo keeps its own).
async function undo() {
  if (!state.photo || state.running) return;
  const applied = state.undo.get(state.photo.id) || [];
  const last = applied.pop();
  if (!last) return;
  await refresh();
  await apply(last, state.photo, false, "Undone: rendered as before,");
}

function onKey(event) {
  const typing = event.target.closest("select, textarea, input:not([type=radio])");
  if (typing || event.metaKey || event.ctrlKey || event.altKey) return;
  const keys = {
    j: () => select(state.index + 1), ArrowRight: () => select(state.index + 1),
    k: () => select(state.index - 1), ArrowLeft: () => select(state.index - 1),
    Enter: () => apply(), a: () => approve(), u: () => undo(), r: () => reset(),
  };
  const action = keys[event.key];
  if (action) { event.preventDefault(); action(); }
}

function start() {
  $("stage").addEventListener("click", onStageClick);
  $("stage").addEventListener("pointerdown", onStagePress);
  $("apply").addEventListener("click", () => apply());
  $("reset").addEventListener("click", reset);
  $("discard").addEventListener("click", () => { state.pending.clear(); draw(); });
  $("approve").addEventListener("click", approve);
  $("undo").addEventListener("click", undo);
  $("cancel").addEventListener("click", cancelRender);
  $("target").addEventListener("change", (event) => { state.target = event.target.value; event.target.blur(); draw(); });
  $("ratio-filter").addEventListener("change", () => { state.target = $("ratio-filter").value || state.target; });
  for (const id of ["shown", "ratio-filter", "below"]) $(id).addEventListener("change", () => loadList());
  window.addEventListener("resize", () => { if (state.photo) { sizeStage(); draw(); } });
  document.addEventListener("keydown", onKey);
  new IntersectionObserver((seen) => { if (seen.some((e) => e.isIntersecting)) loadMore(); }).observe($("more"));
  const first = $("first");
  loadList(first ? JSON.parse(first.textContent) : null);
}

start();
