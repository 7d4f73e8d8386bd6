/* KG reasoner demo page: plain JS, no build step, no libraries.
 * Data: the JSON embedded in index.html (also written as data.json) by library/demo/site.py. */
"use strict";

const DATA = JSON.parse(document.getElementById("demo-data").textContent);
const PHASES = DATA.phases;
const SVGNS = "http://www.w3.org/2000/svg";
const PHASE_COLORS = { base: "#8a8f98", sft: "#3f7fd8", rsft: "#9b59b6", grpo: "#e0832a" };
// Entity types are the graph's own: each run's types get the palette's colours in sorted order.
const TYPE_PALETTE = ["#e05d5d", "#e0a03a", "#4a90d9", "#3fae6a", "#8e6bbf", "#d4699e", "#3fb5b5", "#a3853d", "#6f7fa8", "#5f9e4f"];
function typeColor(r, type) {
  if (!r._typeColors) {
    const types = [...new Set(Object.values(r.entities).map((e) => e.type))].sort();
    r._typeColors = Object.fromEntries(types.map((ty, i) => [ty, TYPE_PALETTE[i % TYPE_PALETTE.length]]));
  }
  return r._typeColors[type] || "#999";
}

const state = { run: 0, phase: null, split: null, index: 0, playing: false, timer: null, hopTimers: [], demo: false, hopMs: null };

const $ = (id) => document.getElementById(id);
function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}
function svgEl(tag, attrs = {}, text) {
  const node = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}
function fmt(v, digits = 3) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  return String(parseFloat(Number(v).toFixed(digits)));
}
function pct(v) { return v === null || v === undefined ? "–" : (100 * v).toFixed(1) + "%"; }

function run() { return DATA.runs[state.run]; }
function entityLabel(r, id) { return (r.entities[id] || {}).label || id; }
function relLabel(r, id) { return r.relations[id] || id; }

// ------------------------------------------------------------------ pickers
function phasesOf(r) { return PHASES.filter((p) => r.episodes[p] && Object.keys(r.episodes[p]).length); }
function splitsOf(r, phase) {
  const order = ["eval", "eval_shuffled", "train_hard", "train"];
  const have = Object.keys((r.episodes[phase] || {}));
  return order.filter((s) => have.includes(s)).concat(have.filter((s) => !order.includes(s)));
}
function currentEpisodes() {
  const r = run();
  if (!r || !state.phase) return [];
  return ((r.episodes[state.phase] || {})[state.split]) || [];
}

function buildPhasePicker() {
  const box = $("phase-picker");
  box.textContent = "";
  const r = run();
  const have = r ? phasesOf(r) : [];
  for (const p of PHASES) {
    const b = el("button", { type: "button", "data-phase": p, role: "tab" }, p.toUpperCase());
    if (!have.includes(p)) { b.disabled = true; b.title = "no episodes for this phase in this run"; }
    b.addEventListener("click", () => selectPhase(p));
    box.appendChild(b);
  }
}

function selectPhase(phase, keepQuestion = true) {
  const r = run();
  const prev = currentEpisodes()[state.index];
  state.phase = phase;
  const splits = splitsOf(r, phase);
  if (!splits.includes(state.split)) state.split = splits[0] || null;
  const sp = $("split-picker");
  sp.textContent = "";
  for (const s of splits) sp.appendChild(el("option", { value: s }, s));
  sp.value = state.split || "";
  document.querySelectorAll("#phase-picker button").forEach((b) => {
    b.classList.toggle("active", b.dataset.phase === phase);
    b.setAttribute("aria-selected", b.dataset.phase === phase ? "true" : "false");
  });
  const eps = currentEpisodes();
  let idx = 0;
  if (keepQuestion && prev) {
    const same = eps.findIndex((e) => e.ex_id === prev.ex_id);
    if (same >= 0) idx = same;
  }
  document.body.dataset.phase = phase;
  showEpisode(idx);
  drawCharts();
}

function selectRun(i) {
  state.run = i;
  state.phase = null;
  state.split = null;
  buildPhasePicker();
  renderRunInfo();
  const r = run();
  const phases = r ? phasesOf(r) : [];
  if (phases.length) {
    selectPhase(phases.includes("grpo") ? phases[0] : phases[0], false);
  } else {
    showEpisode(0);
    drawCharts();
  }
}

// ------------------------------------------------------------------ run info
function renderRunInfo() {
  const box = $("run-info");
  box.textContent = "";
  const r = run();
  if (!r) return;
  const m = r.meta || {};
  const mm = m.model || {};
  const model = (typeof mm === "string" ? mm : (mm.spec && typeof mm.spec === "object" ? (mm.spec.name || mm.spec.spec) : (mm.name || mm.spec || mm.class))) || "?";
  const head = el("div", { class: "run-meta" });
  const parts = [["run", r.run_id], ["model", typeof model === "string" ? model : JSON.stringify(model)],
    ["profile", m.profile], ["seed", m.seed], ["reward", m.reward && (m.reward.preset || JSON.stringify(m.reward))],
    ["phases", (m.phases_completed || []).join(" → ")], ["episodes", r.n_episodes], ["created", m.created]];
  for (const [k, v] of parts) {
    if (v === undefined || v === null || v === "") continue;
    const s = el("span", { class: "kv" });
    s.appendChild(el("b", {}, k + " "));
    s.appendChild(document.createTextNode(String(v)));
    head.appendChild(s);
  }
  if (m.fixture) head.appendChild(el("span", { class: "kv fixture" }, "synthetic test fixture"));
  box.appendChild(head);
  const split = r.headline.eval ? "eval" : Object.keys(r.headline)[0];
  if (split) {
    const t = el("table", { class: "headline", id: "headline" });
    const tr0 = el("tr");
    for (const h of ["phase", `${split} accuracy`, "95% CI", "n", "grounded right", "format ok", "path coverage", "mean reward"]) tr0.appendChild(el("th", {}, h));
    t.appendChild(tr0);
    for (const p of PHASES) {
      const h = r.headline[split][p];
      if (!h) continue;
      const tr = el("tr", { "data-phase": p });
      const ci = h.accuracy_ci ? `[${pct(h.accuracy_ci[0])}, ${pct(h.accuracy_ci[1])}]` : "–";
      // right answers whose TRACE states the whole gold path (metrics.json "grounded"), of all right ones
      const grounded = h.grounded == null ? "–" : (h.correct ? `${h.grounded} of ${h.correct}` : "0");
      for (const v of [p.toUpperCase(), pct(h.accuracy), ci, h.n, grounded, pct(h.valid_format_rate), fmt(h.path_coverage), fmt(h.reward_total)]) tr.appendChild(el("td", {}, String(v)));
      t.appendChild(tr);
    }
    box.appendChild(t);
  }
  noteBox(box, "far", "One hop past eval (eval_far: a length no phase trained on)", farLines(r.headline.eval_far || {}));
  noteBox(box, "reward-adds", "What the graph's reward adds, measured on this run (paired, 95% intervals)",
    rewardAdds(r.metrics || {}));
  noteBox(box, "repairs", "What each RL phase made right, by why the phase before was wrong (eval, question by question)",
    repairLines(r.repairs || [], r.departure_words || {}));
  if (r.n_missing_questions) {
    box.appendChild(el("div", { class: "notice" }, `${r.n_missing_questions} episode question(s) not found in the question files (no graph for them), e.g. ${r.missing_questions.slice(0, 3).join(", ")}`));
  }
}

// A titled list of sentences under the headline, left out when there are none.
function noteBox(box, id, title, lines) {
  if (!lines.length) return;
  const list = el("ul", { class: "reward-adds", id });
  for (const line of lines) list.appendChild(el("li", {}, line));
  const sec = el("div", { class: "reward-adds-box" });
  sec.appendChild(el("b", {}, title));
  sec.appendChild(list);
  box.appendChild(sec);
}

// eval_far per phase measured (metrics.json "eval_far"), one sentence each.
function farLines(far) {
  const out = [];
  for (const p of PHASES) {
    const h = far[p];
    if (!h) continue;
    const ci = h.accuracy_ci ? ` [${pct(h.accuracy_ci[0])}, ${pct(h.accuracy_ci[1])}]` : "";
    out.push(`${p.toUpperCase()}: ${pct(h.accuracy)}${ci} of ${h.n} questions, ${h.grounded == null ? "–" : h.grounded} of ${h.correct} right answers grounded`);
  }
  return out;
}

// The run's experiments against a right/wrong reward (metrics.json "ablation" and "selection"),
// one sentence each, worded from the numbers: an interval that holds 0 is said to be not measurable.
function points(c) {
  const p = v => (v >= 0 ? "+" : "") + (100 * v).toFixed(1);
  const measurable = c.ci[0] > 0 || c.ci[1] < 0;
  return `${p(c.diff)} points [${p(c.ci[0])}, ${p(c.ci[1])}]${measurable ? "" : " (not measurable)"}`;
}
function rewardAdds(m) {
  const out = [];
  if (m.ablation && m.ablation.vs_grpo) {
    out.push(`GRPO with a correctness-only reward, against the path reward, same start: ${points(m.ablation.vs_grpo)}, n = ${m.ablation.vs_grpo.n}`);
  }
  const s = m.selection;
  if (s && s.over_seeds) {
    out.push(`RSFT data chosen by correctness alone, against the graph's reward, ${s.seeds.length} seeds: ${points(s.over_seeds)}; ` +
      `grounded right ${points(s.over_seeds_grounded)}; another answer on ${s.prompts_with_another_winner} of ${s.n_prompts} prompts, n = ${s.n}`);
  }
  return out;
}

// The run's "repairs" (kgr diagnose): where the earlier phase's wrong TRACE first left its path,
// in the words the run data carries (departure_words).
function repairLines(repairs, words) {
  return repairs.filter((b) => Object.keys(b.wrong).length).map((b) => {
    const total = Object.values(b.wrong).reduce((a, v) => a + v, 0);
    const kinds = Object.entries(b.wrong).map(([k, n]) => `${b.repaired[k]} of ${n} ${words[k] || k}`).join("; ");
    // what a training chain can show of them (kgr diagnose's reach): RL's prompts are training questions
    const r = b.wrong_by_reach, fixed = b.repaired_by_reach;
    const reach = r && r.beyond ? ` (${fixed.beyond} of the ${r.beyond} that no training question could show wrong: ` +
      `a step after step ${b.longest_trained}, or the last relation taken at step ${b.longest_trained})` : "";
    return `${b.phase.toUpperCase()} made right, of ${b.before.toUpperCase()}'s ${total} wrong: ${kinds}${reach}; ` +
      `and turned ${b.broken} right answer${b.broken === 1 ? "" : "s"} wrong`;
  });
}

// ------------------------------------------------------------------ graph
function clearHopTimers() { state.hopTimers.forEach(clearTimeout); state.hopTimers = []; }

function drawGraph(svg, r, q, ep, animate) {
  svg.textContent = "";
  if (!q) {
    svg.appendChild(svgEl("text", { x: 500, y: 310, "text-anchor": "middle", class: "graph-empty" }, "question not found: no graph"));
    return;
  }
  const g = q.graph;
  svg.setAttribute("viewBox", `0 0 ${g.width} ${g.height}`);
  const defs = svgEl("defs");
  for (const [id, cls] of [["arrow", "arrow"], ["arrow-lit", "arrow lit"], ["arrow-false", "arrow false"]]) {
    const mk = svgEl("marker", { id: svg.id + "-" + id, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 14, markerHeight: 14, markerUnits: "userSpaceOnUse", orient: "auto-start-reverse" });
    mk.appendChild(svgEl("path", { d: "M0,0 L10,5 L0,10 z", class: cls }));
    defs.appendChild(mk);
  }
  svg.appendChild(defs);
  const pos = {};
  for (const n of g.nodes) pos[n.id] = n;
  const mentioned = new Set((ep ? ep.spans : []).map((s) => s[2]));
  const claims = ep ? ep.claims : [];
  const falseKeys = new Set(claims.filter((c) => !c.in_kg).map((c) => `${c.src}|${c.rel}|${c.dst}`));
  const trueClaimKeys = new Set(claims.filter((c) => c.in_kg).map((c) => `${c.src}|${c.rel}|${c.dst}`));
  const edgeLayer = svgEl("g", { class: "edges" });
  const R = 22;
  const pairCount = {};
  for (const e of g.edges) { const k = [e.src, e.dst].sort().join("|"); pairCount[k] = (pairCount[k] || 0) + 1; }
  const pairSeen = {};
  for (const e of g.edges) {
    const key = `${e.src}|${e.rel}|${e.dst}`;
    if (e.kind === "claim" && !falseKeys.has(key)) continue;
    const a = pos[e.src], b = pos[e.dst];
    const dx = b.x - a.x, dy = b.y - a.y, len = Math.hypot(dx, dy) || 1;
    // parallel edges (both directions, or two relations) bend apart; a straight one otherwise
    const pk = [e.src, e.dst].sort().join("|");
    const nth = (pairSeen[pk] = (pairSeen[pk] || 0) + 1) - 1;
    let bend = pairCount[pk] > 1 ? (nth - (pairCount[pk] - 1) / 2) * 44 * (e.src < e.dst ? 1 : -1) : 0;
    if (e.kind === "claim") bend = Math.sign(dx || 1) * Math.min(140, 30 + len / 4);  // false claims arc below the row
    const nx = -dy / len, ny = dx / len;
    const cx = (a.x + b.x) / 2 + nx * bend, cy = (a.y + b.y) / 2 + ny * bend;
    const ux1 = cx - a.x, uy1 = cy - a.y, l1 = Math.hypot(ux1, uy1) || 1;
    const ux2 = b.x - cx, uy2 = b.y - cy, l2 = Math.hypot(ux2, uy2) || 1;
    const x1 = a.x + (ux1 / l1) * R, y1 = a.y + (uy1 / l1) * R, x2 = b.x - (ux2 / l2) * (R + 2), y2 = b.y - (uy2 / l2) * (R + 2);
    const cls = ["edge"];
    if (e.hop !== null && e.hop !== undefined) cls.push("path");
    if (e.kind === "claim") cls.push("false-claim");
    if (trueClaimKeys.has(key)) cls.push("claimed");
    const grp = svgEl("g", { class: cls.join(" "), "data-src": e.src, "data-dst": e.dst, "data-rel": e.rel });
    if (e.hop !== null && e.hop !== undefined) grp.dataset.hop = e.hop;
    const marker = e.kind === "claim" ? "arrow-false" : (e.hop !== null && e.hop !== undefined ? "arrow-lit" : "arrow");
    grp.appendChild(svgEl("path", { d: `M${x1},${y1} Q${cx},${cy} ${x2},${y2}`, "marker-end": `url(#${svg.id}-${marker})` }));
    const mx = (a.x + 2 * cx + b.x) / 4, my = (a.y + 2 * cy + b.y) / 4;
    const lbl = (e.kind === "claim" ? "✗ " : "") + relLabel(r, e.rel);
    const vertical = Math.abs(dx) < Math.abs(dy) / 2;
    const left = vertical && (bend * (dy > 0 ? 1 : -1) > 0);
    grp.appendChild(svgEl("text", vertical ? { x: mx + (left ? -8 : 8), y: my + 4, "text-anchor": left ? "end" : "start", class: "edge-label" }
      : { x: mx, y: my - 8, "text-anchor": "middle", class: "edge-label" }, lbl));
    edgeLayer.appendChild(grp);
  }
  svg.appendChild(edgeLayer);
  const nodeLayer = svgEl("g", { class: "nodes" });
  for (const n of g.nodes) {
    const cls = ["node"];
    if (n.path_index !== null && n.path_index !== undefined) cls.push("path");
    if (n.path_index === 0) cls.push("start");
    if (n.path_index === q.path.length - 1) cls.push("answer");
    if (mentioned.has(n.id)) cls.push("mentioned");
    const grp = svgEl("g", { class: cls.join(" "), "data-id": n.id, transform: `translate(${n.x},${n.y})` });
    if (n.path_index !== null && n.path_index !== undefined) grp.dataset.pathIndex = n.path_index;
    grp.appendChild(svgEl("circle", { r: R + 6, class: "halo" }));
    grp.appendChild(svgEl("circle", { r: R, fill: typeColor(r, n.type), class: "dot" }));
    const words = n.label.split(" ");
    const lines = [];
    for (const w of words) {
      if (lines.length && (lines[lines.length - 1] + " " + w).length <= 18) lines[lines.length - 1] += " " + w;
      else lines.push(w);
    }
    const t = svgEl("text", { y: R + 18, "text-anchor": "middle", class: "node-label" });
    lines.slice(0, 3).forEach((ln, i) => t.appendChild(svgEl("tspan", { x: 0, dy: i ? "1.1em" : 0 }, ln)));
    grp.appendChild(t);
    if (n.path_index === 0) grp.appendChild(svgEl("text", { y: -R - 10, "text-anchor": "middle", class: "node-tag" }, "start"));
    nodeLayer.appendChild(grp);
  }
  svg.appendChild(nodeLayer);
  // light the gold path hop by hop
  const hops = q.path_edges.length;
  const delay = state.hopMs ?? (state.demo ? 700 : 300);
  const light = (i) => {
    svg.querySelectorAll(`.node[data-path-index="${i}"]`).forEach((x) => x.classList.add("lit"));
    if (i > 0) svg.querySelectorAll(`.edge[data-hop="${i - 1}"]`).forEach((x) => x.classList.add("lit"));
    if (i === hops) svg.dataset.litComplete = "1";
  };
  svg.dataset.hops = hops;
  svg.dataset.litComplete = "0";
  if (!animate) { for (let i = 0; i <= hops; i++) light(i); return; }
  for (let i = 0; i <= hops; i++) state.hopTimers.push(setTimeout(() => light(i), Math.min(150, delay) + i * delay));
}

// ------------------------------------------------------------------ text
function renderCompletion(box, r, text, spans, pathSet) {
  box.textContent = "";
  let pos = 0;
  for (const [s, e, id] of spans) {
    if (s > pos) box.appendChild(document.createTextNode(text.slice(pos, s)));
    const cls = pathSet.has(id) ? "ent on-path" : "ent off-path";
    const m = el("mark", { class: cls, "data-id": id, title: `${entityLabel(r, id)} (${pathSet.has(id) ? "on the gold path" : "not on the gold path"})` }, text.slice(s, e));
    box.appendChild(m);
    pos = e;
  }
  box.appendChild(document.createTextNode(text.slice(pos)));
}

function renderOptions(list, q, chosen) {
  list.textContent = "";
  if (!q) return;
  for (const letter of ["A", "B", "C", "D"]) {
    const li = el("li", { "data-letter": letter });
    li.appendChild(el("b", {}, letter + ") "));
    li.appendChild(document.createTextNode(q.options[letter]));
    if (letter === q.answer_star) { li.classList.add("gold"); li.appendChild(el("span", { class: "tag" }, " gold")); }
    if (letter === chosen) { li.classList.add("chosen", letter === q.answer_star ? "right" : "wrong"); li.appendChild(el("span", { class: "tag" }, " model")); }
    list.appendChild(li);
  }
}

function renderAnswer(box, ep) {
  box.textContent = "";
  const a = ep.parsed.answer;
  const ok = ep.correct;
  box.className = ok ? "right" : "wrong";
  box.dataset.correct = ok ? "1" : "0";
  box.appendChild(el("span", { class: "answer-letter" }, "ANSWER: " + (a || "—")));
  box.appendChild(el("span", { class: "verdict" }, ok ? " ✓ right" : (a ? " ✗ wrong" : " ✗ no valid answer")));
  box.appendChild(el("span", { class: "gold-letter" }, ` (gold ${ep.answer_star || "?"})`));
  if (!ep.parsed.valid_format) box.appendChild(el("span", { class: "bad-format" }, " · malformed output"));
}

function renderClaims(list, r, claims) {
  list.textContent = "";
  for (const c of claims) {
    const li = el("li", { class: c.in_kg ? (c.on_path ? "claim ok" : "claim true-off") : "claim false" });
    li.textContent = `${c.in_kg ? (c.on_path ? "✓ gold edge" : "✓ true, off path") : "✗ not in KG"}: ${entityLabel(r, c.src)} ${relLabel(r, c.rel)} ${entityLabel(r, c.dst)}`;
    list.appendChild(li);
  }
}

// ------------------------------------------------------------------ reward HUD
const REWARD_ORDER = ["correctness", "path_coverage", "path_reward", "edge_reward", "spam_penalty", "total"];
function rewardKeys(reward) {
  const keys = Object.keys(reward);
  const ordered = REWARD_ORDER.filter((k) => keys.includes(k)).concat(keys.filter((k) => !REWARD_ORDER.includes(k) && k !== "total").sort());
  if (keys.includes("total") && ordered[ordered.length - 1] !== "total") { ordered.splice(ordered.indexOf("total"), 1); ordered.push("total"); }
  return ordered;
}
function rewardScale(r) {
  let m = 1;
  for (const p of Object.values(r.episodes)) for (const eps of Object.values(p)) for (const e of eps) for (const v of Object.values(e.reward)) m = Math.max(m, Math.abs(v));
  return m;
}
function renderHud(box, reward, scale) {
  box.textContent = "";
  const details = el("div", { class: "hud-details" });
  for (const k of rewardKeys(reward)) {
    if (!REWARD_ORDER.includes(k)) {  // counts and extras the reward logs (false_edges, hits, ...)
      details.appendChild(el("span", { class: "detail", "data-key": k, "data-value": String(reward[k]) }, `${k.replace(/_/g, " ")} ${fmt(reward[k])}`));
      continue;
    }
    const v = reward[k];
    const row = el("div", { class: "bar" + (k === "total" ? " total" : ""), "data-key": k, "data-value": String(v) });
    row.appendChild(el("span", { class: "bar-name" }, k.replace(/_/g, " ")));
    const track = el("span", { class: "bar-track" });
    const fill = el("span", { class: "bar-fill " + (v >= 0 ? "pos" : "neg") });
    const w = Math.min(50, (50 * Math.abs(v)) / scale);
    fill.style.width = w + "%";
    fill.style.left = v >= 0 ? "50%" : 50 - w + "%";
    track.appendChild(el("span", { class: "bar-zero" }));
    track.appendChild(fill);
    row.appendChild(track);
    row.appendChild(el("span", { class: "bar-value" }, (v > 0 ? "+" : "") + fmt(v)));
    box.appendChild(row);
  }
  if (details.childNodes.length) box.appendChild(details);
}

// ------------------------------------------------------------------ episode
function showEpisode(i) {
  clearHopTimers();
  const eps = currentEpisodes();
  const r = run();
  const n = eps.length;
  state.index = n ? Math.max(0, Math.min(n - 1, i)) : 0;
  const sc = $("scrubber");
  sc.max = Math.max(0, n - 1);
  sc.value = state.index;
  $("counter").textContent = n ? `${state.index + 1} / ${n}` : "0 / 0";
  const ep = eps[state.index];
  document.body.dataset.episode = ep ? ep.i : "";
  if (!ep) {
    $("graph").textContent = "";
    $("question").textContent = r ? "No episodes for this phase." : "No run to show.";
    for (const id of ["options", "completion", "answer", "claims", "hud", "compare", "q-meta"]) $(id).textContent = "";
    return;
  }
  const q = r.questions[ep.ex_id];
  const meta = [`${ep.ex_id}`, `${ep.hop_len ?? "?"} hops`, `${ep.split}`, `${state.phase.toUpperCase()} step ${ep.step}`];
  if (ep.sample_idx !== null && ep.sample_idx !== undefined) meta.push(`sample ${ep.sample_idx}`);
  $("q-meta").textContent = "· " + meta.join(" · ");
  $("question").textContent = q ? q.question : ep.ex_id + " (question text not found; prompt below)";
  renderOptions($("options"), q, ep.parsed.answer);
  const pathSet = new Set(q ? q.path : []);
  renderCompletion($("completion"), r, ep.completion, ep.spans, pathSet);
  renderAnswer($("answer"), ep);
  renderClaims($("claims"), r, ep.claims);
  renderHud($("hud"), ep.reward, rewardScale(r));
  drawGraph($("graph"), r, q, ep, true);
  renderCompare(ep);
}

function renderCompare(ep) {
  const box = $("compare");
  box.textContent = "";
  const r = run();
  const q = r.questions[ep.ex_id];
  const pathSet = new Set(q ? q.path : []);
  for (const p of PHASES) {
    const eps = ((r.episodes[p] || {})[state.split]) || [];
    const other = p === state.phase ? ep : eps.find((e) => e.ex_id === ep.ex_id);
    const col = el("div", { class: "compare-col" + (p === state.phase ? " current" : ""), "data-phase": p });
    col.appendChild(el("div", { class: "compare-phase" }, p.toUpperCase()));
    if (!other) { col.appendChild(el("div", { class: "muted" }, "not asked in this phase")); box.appendChild(col); continue; }
    const ans = el("div", { class: "compare-answer " + (other.correct ? "right" : "wrong") }, `ANSWER ${other.parsed.answer || "—"} ${other.correct ? "✓" : "✗"}`);
    col.appendChild(ans);
    const pre = el("pre", { class: "compare-trace" });
    renderCompletion(pre, r, other.completion, other.spans, pathSet);
    col.appendChild(pre);
    col.appendChild(el("div", { class: "compare-reward" }, `reward ${fmt(other.reward.total)}`));
    col.addEventListener("click", () => { if (p !== state.phase && !col.querySelector(".muted")) selectPhase(p); });
    box.appendChild(col);
  }
}

// ------------------------------------------------------------------ charts
function axes(svg, x0, y0, w, h, ymin, ymax, yTicks, yfmt) {
  for (const t of yTicks) {
    const y = y0 + h - ((t - ymin) / (ymax - ymin)) * h;
    svg.appendChild(svgEl("line", { x1: x0, x2: x0 + w, y1: y, y2: y, class: "grid" }));
    svg.appendChild(svgEl("text", { x: x0 - 6, y: y + 4, "text-anchor": "end", class: "tick" }, yfmt(t)));
  }
}
function noData(svg, msg) { svg.appendChild(svgEl("text", { x: 260, y: 150, "text-anchor": "middle", class: "muted" }, msg)); }

function legend(svg, names, x, y) {
  names.forEach((nm, i) => {
    svg.appendChild(svgEl("rect", { x: x + i * 90, y: y - 9, width: 10, height: 10, fill: PHASE_COLORS[nm] || "#555" }));
    svg.appendChild(svgEl("text", { x: x + i * 90 + 14, y: y, class: "tick" }, nm.toUpperCase()));
  });
}

function drawHopChart() {
  const svg = $("chart-hop");
  svg.textContent = "";
  const r = run();
  const split = state.split && r && r.metrics[state.split] ? state.split : "eval";
  const block = r && r.metrics[split];
  if (!block) return noData(svg, "no metrics for this split");
  const phases = PHASES.filter((p) => block[p] && block[p].by_hop);
  const hops = [...new Set(phases.flatMap((p) => Object.keys(block[p].by_hop)))].sort((a, b) => a - b);
  if (!hops.length) return noData(svg, "no accuracy-by-hop metrics");
  const x0 = 50, y0 = 20, w = 450, h = 220;
  axes(svg, x0, y0, w, h, 0, 1, [0, 0.25, 0.5, 0.75, 1], (t) => Math.round(t * 100) + "%");
  const gw = w / hops.length, bw = Math.min(40, (gw - 16) / phases.length);
  hops.forEach((hop, hi) => {
    const gx = x0 + hi * gw + (gw - bw * phases.length) / 2;
    svg.appendChild(svgEl("text", { x: x0 + hi * gw + gw / 2, y: y0 + h + 18, "text-anchor": "middle", class: "tick" }, `${hop} hops`));
    phases.forEach((p, pi) => {
      const d = block[p].by_hop[hop];
      if (!d) return;
      const bx = gx + pi * bw, by = y0 + h - d.accuracy * h;
      svg.appendChild(svgEl("rect", { x: bx + 2, y: by, width: bw - 4, height: y0 + h - by, fill: PHASE_COLORS[p], class: "hop-bar", "data-phase": p, "data-hop": hop, "data-value": d.accuracy }));
      if (d.accuracy_ci) {
        const [lo, hi2] = d.accuracy_ci, cx = bx + bw / 2;
        const ylo = y0 + h - lo * h, yhi = y0 + h - hi2 * h;
        svg.appendChild(svgEl("line", { x1: cx, x2: cx, y1: ylo, y2: yhi, class: "whisker" }));
        svg.appendChild(svgEl("line", { x1: cx - 5, x2: cx + 5, y1: ylo, y2: ylo, class: "whisker" }));
        svg.appendChild(svgEl("line", { x1: cx - 5, x2: cx + 5, y1: yhi, y2: yhi, class: "whisker" }));
      }
      svg.appendChild(svgEl("text", { x: bx + bw / 2, y: by - 4, "text-anchor": "middle", class: "tick small" }, `n=${d.n}`));
    });
  });
  legend(svg, phases, x0, y0 + h + 45);
}

function lineChart(svg, series, yfmt, fixedRange) {
  svg.textContent = "";
  const pts = series.flatMap((s) => s.points);
  if (!pts.length) return noData(svg, "no training steps logged");
  const x0 = 55, y0 = 20, w = 445, h = 220;
  const xs = pts.map((p) => p.x);
  const xmin = Math.min(...xs), xmax = Math.max(...xs) === xmin ? xmin + 1 : Math.max(...xs);
  let ymin, ymax;
  if (fixedRange) [ymin, ymax] = fixedRange;
  else {
    const ys = pts.flatMap((p) => [p.y, p.lo ?? p.y, p.hi ?? p.y]);
    ymin = Math.min(...ys); ymax = Math.max(...ys);
    if (ymax - ymin < 1e-9) { ymin -= 0.5; ymax += 0.5; }
    const pad = (ymax - ymin) * 0.08; ymin -= pad; ymax += pad;
  }
  const ticks = [0, 1, 2, 3, 4].map((i) => ymin + (i * (ymax - ymin)) / 4);
  axes(svg, x0, y0, w, h, ymin, ymax, ticks, yfmt);
  const X = (x) => x0 + ((x - xmin) / (xmax - xmin)) * w, Y = (y) => y0 + h - ((y - ymin) / (ymax - ymin)) * h;
  svg.appendChild(svgEl("text", { x: x0, y: y0 + h + 18, class: "tick" }, `step ${xmin}`));
  svg.appendChild(svgEl("text", { x: x0 + w, y: y0 + h + 18, "text-anchor": "end", class: "tick" }, `step ${xmax}`));
  for (const s of series) {
    const color = s.color || PHASE_COLORS[s.phase] || "#555";
    const band = s.points.filter((p) => p.lo !== undefined);
    if (band.length) {
      const d = band.map((p, i) => `${i ? "L" : "M"}${X(p.x)},${Y(p.hi)}`).join(" ") + " " +
        band.slice().reverse().map((p) => `L${X(p.x)},${Y(p.lo)}`).join(" ") + " Z";
      svg.appendChild(svgEl("path", { d, fill: color, class: "band" }));
    }
    svg.appendChild(svgEl("path", { d: s.points.map((p, i) => `${i ? "L" : "M"}${X(p.x)},${Y(p.y)}`).join(" "), stroke: color, class: "line" }));
    for (const p of s.points) svg.appendChild(svgEl("circle", { cx: X(p.x), cy: Y(p.y), r: 2.5, fill: color }));
  }
  series.forEach((s, i) => {
    svg.appendChild(svgEl("rect", { x: x0 + (i % 3) * 150, y: y0 + h + 32 + Math.floor(i / 3) * 16, width: 10, height: 10, fill: s.color || PHASE_COLORS[s.phase] || "#555" }));
    svg.appendChild(svgEl("text", { x: x0 + (i % 3) * 150 + 14, y: y0 + h + 41 + Math.floor(i / 3) * 16, class: "tick" }, s.name));
  });
}

function drawCharts() {
  const r = run();
  drawHopChart();
  if (!r) return;
  const sc = r.step_curves || {};
  const phases = PHASES.filter((p) => sc[p]);
  lineChart($("chart-acc"), phases.map((p) => ({ name: p.toUpperCase(), phase: p, points: sc[p].map((d) => ({ x: d.step, y: d.accuracy, lo: d.accuracy_ci[0], hi: d.accuracy_ci[1] })) })), (t) => Math.round(t * 100) + "%", [0, 1]);
  lineChart($("chart-reward"), phases.map((p) => ({ name: p.toUpperCase(), phase: p, points: sc[p].map((d) => ({ x: d.step, y: d.reward_total, lo: d.reward_ci[0], hi: d.reward_ci[1] })) })), (t) => fmt(t, 2));
  const curves = r.metrics.curves || {};
  const series = [];
  const palette = ["#3f7fd8", "#e0832a", "#3fae6a", "#9b59b6", "#e05d5d", "#8a8f98"];
  for (const p of Object.keys(curves)) {
    const rows = curves[p] || [];
    const keys = [...new Set(rows.flatMap((row) => Object.keys(row).filter((k) => k !== "step" && typeof row[k] === "number")))];
    for (const k of keys) series.push({ name: `${p} ${k}`, color: palette[series.length % palette.length], points: rows.filter((row) => typeof row[k] === "number").map((row) => ({ x: row.step, y: row[k] })) });
  }
  lineChart($("chart-curves"), series, (t) => fmt(t, 2));
  drawMonitorChart(r.monitor || []);
}

// One slot per RL step (RSFT's round, then GRPO's steps); a line per signal in multiples of its
// threshold, so one axis serves them all; the band above shows each step's status.
const STATUS_COLORS = { ok: "#3fbf74", warning: "#e0a03a", stop: "#e5534b" };
const SIGNAL_NAMES = { spam_rate: "spam", option_listing_rate: "options listed", coverage_without_correctness_rate: "path, wrong answer",
  false_edge_rise: "false-edge rise", trace_chars_z: "TRACE length z", kl: "KL" };
function drawMonitorChart(points) {
  const svg = $("chart-monitor");
  svg.textContent = "";
  if (!points.length) return noData(svg, "no RL steps judged in this run");
  const x0 = 55, y0 = 34, w = 445, h = 196;
  const signals = [...new Set(points.flatMap((p) => Object.keys(p.ratios)))];
  const values = points.flatMap((p) => Object.values(p.ratios));
  // below 0: a relative signal under its warm-up level (fewer false edges, shorter TRACEs)
  const ymin = Math.min(0, ...values) * 1.05, ymax = Math.max(2.5, ...values) * 1.05;
  const ticks = [0, 1, 2].concat(ymax > 4 ? [Math.floor(ymax)] : [], ymin < -0.5 ? [Math.ceil(ymin)] : []);
  axes(svg, x0, y0, w, h, ymin, ymax, ticks, (t) => fmt(t, 1) + "x");
  const slot = w / points.length, X = (i) => x0 + (i + 0.5) * slot, Y = (v) => y0 + h - ((v - ymin) / (ymax - ymin)) * h;
  for (const [level, name] of [[1, "warn"], [2, "stop"]]) {
    svg.appendChild(svgEl("line", { x1: x0, x2: x0 + w, y1: Y(level), y2: Y(level), class: "threshold " + name }));
  }
  points.forEach((p, i) => {
    const band = svgEl("rect", { x: x0 + i * slot + 1, y: 8, width: Math.max(1, slot - 2), height: 14, fill: STATUS_COLORS[p.status], class: "status-band", "data-status": p.status });
    band.appendChild(svgEl("title", {}, `${p.phase} step ${p.step}: ${p.status} (${p.rule})`));
    svg.appendChild(band);
    if (points.length <= 12 || i % Math.ceil(points.length / 12) === 0) {
      svg.appendChild(svgEl("text", { x: X(i), y: y0 + h + 14, "text-anchor": "middle", class: "tick small" }, `${p.phase} ${p.step}`));
    }
  });
  const palette = ["#e05d5d", "#4fc3f7", "#ffd24a", "#9b59b6", "#3fae6a", "#8a8f98"];
  signals.forEach((name, k) => {
    const color = palette[k % palette.length];
    const pts = points.map((p, i) => [i, p.ratios[name]]).filter(([, v]) => v !== undefined);
    svg.appendChild(svgEl("path", { d: pts.map(([i, v], j) => `${j ? "L" : "M"}${X(i)},${Y(v)}`).join(" "), stroke: color, class: "line" }));
    for (const [i, v] of pts) svg.appendChild(svgEl("circle", { cx: X(i), cy: Y(v), r: 2.5, fill: color }));
    svg.appendChild(svgEl("rect", { x: x0 + (k % 3) * 150, y: y0 + h + 24 + Math.floor(k / 3) * 16, width: 10, height: 10, fill: color }));
    svg.appendChild(svgEl("text", { x: x0 + (k % 3) * 150 + 14, y: y0 + h + 33 + Math.floor(k / 3) * 16, class: "tick" }, SIGNAL_NAMES[name] || name));
  });
}

// ------------------------------------------------------------------ playback
const PLAY_MS = () => (state.demo ? 5000 : 2500);
function setPlaying(on) {
  state.playing = on;
  clearInterval(state.timer);
  $("play").innerHTML = on ? "&#10074;&#10074; Pause" : "&#9654; Play";
  document.body.classList.toggle("playing", on);
  if (on) state.timer = setInterval(() => {
    const n = currentEpisodes().length;
    showEpisode(n ? (state.index + 1) % n : 0);
  }, PLAY_MS());
}
function setDemo(on) {
  state.demo = on;
  document.body.classList.toggle("demo", on);
  $("demo-toggle").classList.toggle("active", on);
  setPlaying(on);
  showEpisode(state.index);
}

// ------------------------------------------------------------------ try it
let TRY = null;
function relSelect(value) {
  const s = el("select", { class: "try-rel" });
  for (const [id, label] of TRY.relations) s.appendChild(el("option", { value: id }, label));
  if (value) s.value = value;
  return s;
}
async function initTry() {
  if (location.protocol === "file:") return;
  let status;
  try {
    const res = await fetch("api/status");
    if (!res.ok) return;
    status = await res.json();
  } catch (e) { return; }
  if (!status.try_enabled) return;
  TRY = status;
  $("try-panel").hidden = false;
  $("try-model").textContent = `· ${status.model || ""}${status.adapter ? " + adapter " + status.adapter : " (no adapter found: base weights)"}`;
  const start = $("try-start");
  for (const [id, label] of status.entities) start.appendChild(el("option", { value: id }, label));
  if (status.example) {
    start.value = status.example.start;
    status.example.chain.forEach((rel) => $("try-rels").appendChild(relSelect(rel)));
  } else $("try-rels").appendChild(relSelect());
  $("try-add-rel").addEventListener("click", () => { if ($("try-rels").children.length < 6) $("try-rels").appendChild(relSelect()); });
  $("try-del-rel").addEventListener("click", () => { const c = $("try-rels"); if (c.children.length > 1) c.lastChild.remove(); });
  document.querySelectorAll('input[name="mode"]').forEach((r) => r.addEventListener("change", () => {
    const text = document.querySelector('input[name="mode"]:checked').value === "text";
    $("try-text").hidden = !text; $("try-chain").hidden = text;
  }));
  $("try-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const mode = document.querySelector('input[name="mode"]:checked').value;
    const body = mode === "text" ? { question: $("try-question").value } :
      { start: start.value, chain: [...document.querySelectorAll("#try-rels select")].map((s) => s.value) };
    $("try-status").textContent = "generating…";
    $("try-submit").disabled = true;
    try {
      const res = await fetch("api/try", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
      const out = await res.json();
      if (!res.ok) { $("try-status").textContent = "error: " + (out.error || res.status); $("try-result").hidden = true; return; }
      $("try-status").textContent = `done in ${fmt(out.seconds, 1)} s`;
      showTry(out);
    } catch (e) {
      $("try-status").textContent = "error: " + e;
    } finally { $("try-submit").disabled = false; }
  });
}
function showTry(out) {
  $("try-result").hidden = false;
  const r = { entities: out.entities, relations: out.relations };
  const q = out.question;
  $("try-qtext").textContent = q.question;
  renderOptions($("try-options"), q, out.parsed.answer);
  renderCompletion($("try-completion"), r, out.completion, out.spans, new Set(q.path));
  if (!out.completion.trim()) $("try-completion").appendChild(el("span", { class: "muted" }, "(the model generated no text)"));
  const ep = { parsed: out.parsed, correct: out.correct, answer_star: q.answer_star };
  renderAnswer($("try-answer"), ep);
  renderClaims($("try-claims"), r, out.claims);
  renderHud($("try-hud"), out.reward, Math.max(1, ...Object.values(out.reward).map(Math.abs)));
  drawGraph($("try-graph"), r, q, { spans: out.spans, claims: out.claims }, true);
}

// ------------------------------------------------------------------ wiring
// The site packs each question's graph without what the run's entity map already holds (a node's
// label and type) and without the defaults of a KG edge (no hop, kind "kg"): filled in here, once.
function hydrate() {
  for (const r of DATA.runs) {
    for (const q of Object.values(r.questions)) {
      for (const n of q.graph.nodes) {
        const ent = r.entities[n.id] || {};
        if (n.label === undefined) n.label = ent.label ?? n.id;
        if (n.type === undefined) n.type = ent.type ?? null;
      }
      for (const e of q.graph.edges) {
        if (e.hop === undefined) e.hop = null;
        if (e.kind === undefined) e.kind = "kg";
      }
    }
  }
}

function init() {
  hydrate();
  $("prev").addEventListener("click", () => showEpisode(state.index - 1));
  $("next").addEventListener("click", () => showEpisode(state.index + 1));
  $("play").addEventListener("click", () => setPlaying(!state.playing));
  $("scrubber").addEventListener("input", (e) => showEpisode(Number(e.target.value)));
  $("run-picker").addEventListener("change", (e) => selectRun(Number(e.target.value)));
  $("split-picker").addEventListener("change", (e) => { state.split = e.target.value; showEpisode(0); drawCharts(); });
  $("demo-toggle").addEventListener("click", () => setDemo(!state.demo));
  document.addEventListener("keydown", (e) => {
    if (["INPUT", "TEXTAREA", "SELECT"].includes(document.activeElement.tagName) && document.activeElement.type !== "range") return;
    if (e.key === "ArrowRight") showEpisode(state.index + 1);
    else if (e.key === "ArrowLeft") showEpisode(state.index - 1);
    else if (e.key === " ") { e.preventDefault(); setPlaying(!state.playing); }
    else if (e.key === "d") setDemo(!state.demo);
  });
  const params = new URLSearchParams(location.search);
  if (params.get("hop_ms")) state.hopMs = Math.max(0, Number(params.get("hop_ms")));  // hop-by-hop speed
  if (DATA.runs.length) {
    const want = params.get("run");
    const idx = want ? Math.max(0, DATA.runs.findIndex((r) => r.run_id === want)) : 0;
    $("run-picker").value = String(idx);
    selectRun(idx);
    if (params.get("phase") && phasesOf(run()).includes(params.get("phase"))) selectPhase(params.get("phase"), false);
  } else {
    buildPhasePicker();
    showEpisode(0);
  }
  if (params.get("demo") === "1") setDemo(true);
  initTry();
  document.body.dataset.ready = "1";
}
init();
