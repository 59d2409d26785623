{#- The front page's picker (home.html): platform, torch series, CUDA version and Python ->
    the commands for that variant index. It reads the facts tools.sitegen.picker.picker_facts
    wrote into #picker-data, offers only values some wheel has, marks the values that have no
    wheel with the other choices, and says so plainly when the chosen combination has none.
    The section is hidden in the HTML: without JavaScript the plain sections hold every command. -#}
{% raw %}
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("picker-data").textContent);
  const site = data.site || new URL(".", document.baseURI).href;
  const box = document.getElementById("picker");
  const keys = ["platform", "torch", "cuda", "python"];
  const rows = data.wheels.map(([i, platform, python, project, glibc]) => ({
    index: data.indexes[i], platform: platform, python: python, project: project, glibc: glibc,
    torch: data.indexes[i].torch, cuda: data.indexes[i].cuda,
  }));
  // "3.14t" (a free-threaded build) sorts after 3.14 and before 3.15
  const numeric = (v) => {
    const parts = v.replace(/^pre-/, "").replace(/t$/, "").split(".").map(Number);
    return v.endsWith("t") ? [...parts, 1] : parts;
  };
  const compare = (a, b) => {
    const x = numeric(a), y = numeric(b);
    for (let i = 0; i < Math.max(x.length, y.length); i++) {
      if ((x[i] || 0) !== (y[i] || 0)) return (x[i] || 0) - (y[i] || 0);
    }
    return a < b ? -1 : a > b ? 1 : 0;
  };
  const shown = {platform: {}, torch: {}, cuda: {}, python: {}};
  for (const p of data.platforms) shown.platform[p.name] = p.shown;
  for (const ix of data.indexes) {
    shown.torch[ix.torch] = ix.torch_shown;
    shown.cuda[ix.cuda] = ix.cuda_shown;
  }
  // Every platform of the project is offered (a person on Windows learns there is nothing for
  // them yet); torch, CUDA and Python only as some wheel has them. Newest torch and CUDA first.
  const values = {
    platform: data.platforms.map((p) => p.name),
    torch: [...new Set(rows.map((r) => r.torch))].sort(compare).reverse(),
    cuda: [...new Set(rows.map((r) => r.cuda))].sort(compare).reverse(),
    python: [...new Set(rows.map((r) => r.python))].sort(compare),
  };
  for (const r of rows) shown.python[r.python] = r.python.endsWith("t") ? `${r.python} (free-threaded)` : r.python;
  const matching = (choice, skip) => rows.filter((r) => keys.every((k) => k === skip || r[k] === choice[k]));

  // Start from a combination that exists: Linux x86_64 if it has wheels, the newest torch
  // there, the newest CUDA for it, the newest Python (a normal build where there is one: a
  // free-threaded wheel is only for those who run that interpreter).
  const choice = {};
  let pool = rows;
  for (const k of keys) {
    const have = values[k].filter((v) => pool.some((r) => r[k] === v));
    const normal = have.filter((v) => !v.endsWith("t"));
    const from = k === "python" && normal.length ? normal : have;
    choice[k] = k === "python" ? from[from.length - 1] : have[0];
    pool = pool.filter((r) => r[k] === choice[k]);
  }

  const inputs = {};
  for (const k of keys) {
    const set = box.querySelector(`fieldset[data-key="${k}"]`);
    inputs[k] = {};
    for (const v of values[k]) {
      const label = document.createElement("label");
      label.className = "opt";
      label.dataset.key = k;
      label.dataset.value = v;
      const input = document.createElement("input");
      input.type = "radio";
      input.name = `pick-${k}`;
      input.value = v;
      input.id = `pick-${k}-${v}`;
      input.addEventListener("change", () => { choice[k] = v; update(); });
      label.append(input, document.createTextNode(shown[k][v]));
      set.append(label);
      inputs[k][v] = {input: input, label: label};
    }
  }

  const setLines = (id, lines) => { document.getElementById(id).textContent = lines.join("\n"); };
  const fill = (kind, project, index) => data.commands[kind]
    .split("{project}").join(project).split("{site}").join(site).split("{index}").join(index);

  function update() {
    for (const k of keys) {
      for (const v of values[k]) {
        const {input, label} = inputs[k][v];
        input.checked = choice[k] === v;
        label.classList.toggle("chosen", choice[k] === v);
        const some = matching({...choice, [k]: v}, null).length > 0;
        label.classList.toggle("none", !some);
        label.title = some ? "" : "no wheel with the other choices";
      }
    }
    const found = matching(choice, null);
    const none = document.getElementById("picker-none");
    const result = document.getElementById("picker-result");
    none.hidden = found.length > 0;
    result.hidden = found.length === 0;
    if (!found.length) {
      const said = keys.map((k) => (k === "platform" ? "" : k === "python" ? "Python " : k === "cuda" ? "CUDA " : "torch ") + shown[k][choice[k]]);
      // What the index does have: other Pythons with the same platform, torch and CUDA; else
      // other CUDA versions with the same platform and torch.
      const samePython = matching(choice, "python");
      const sameTorch = rows.filter((r) => r.platform === choice.platform && r.torch === choice.torch);
      const list = (found, k) => [...new Set(found.map((r) => r[k]))].sort(compare).map((v) => shown[k][v]).join(", ");
      const hint = samePython.length ? `With these, the index has Python ${list(samePython, "python")}.`
        : sameTorch.length ? `For torch ${shown.torch[choice.torch]} on ${shown.platform[choice.platform]} it has CUDA ${list(sameTorch, "cuda")}.`
        : `The index has no wheel for torch ${shown.torch[choice.torch]} on ${shown.platform[choice.platform]}.`;
      const why = data.missing ? ' "Missing, and why" below says why a package has none.' : "";
      none.textContent = `No wheels for ${said.join(", ")}. ${hint}${why}`;
      return;
    }
    const index = found[0].index;
    const projects = [...new Set(found.map((r) => r.project))].sort();
    const link = document.getElementById("picker-index");
    link.textContent = `${index.path}/simple/`;
    link.href = `${site}${index.path}/simple/`;
    document.getElementById("picker-projects").textContent = projects.join(", ");
    setLines("picker-pip", projects.map((p) => fill("pip", p, index.path)));
    setLines("picker-uv", projects.map((p) => fill("uv", p, index.path)));
    setLines("picker-select", projects.map((p) => fill("select", p, index.path)));
    const needs = projects.map((p) => `${p}: ${[...new Set(found.filter((r) => r.project === p).map((r) => r.glibc))].join("; ")}`);
    document.getElementById("picker-glibc").textContent = choice.platform.startsWith("linux")
      ? `C library the wheels need: ${needs.join("; ")}.` : "No glibc needed on Windows.";
  }
  update();
  box.hidden = false;
})();
{% endraw %}
