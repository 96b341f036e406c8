// Builds the views into one self-contained HTML document, built/views.html
// (vite-plugin-singlefile): the script and style inlined, nothing loaded from anywhere at
// run time. The three ui:// resources all return it; it picks its view at run time.
//   node build.mjs [outDir]      (default: built/, the package data the service reads)
// The toolchain is the one tests/views/install.sh puts under .tools/views (package.json and
// package-lock.json here, pinned); ELOVA_VIEWS_MODULES names another node_modules.
import { mkdirSync, renameSync, rmSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = resolve(HERE, "../../..");
const MODULES = process.env.ELOVA_VIEWS_MODULES ?? join(ROOT, ".tools/views/node_modules");
const load = (file) => import(pathToFileURL(join(MODULES, file)).href);
const { build } = await load("vite/dist/node/index.js");
const { viteSingleFile } = await load("vite-plugin-singlefile/dist/esm/index.js");

const out = resolve(process.argv[2] ?? join(HERE, "built"));
const scratch = join(out, ".vite");

await build({
  root: join(HERE, "src"),
  configFile: false,
  logLevel: "warn",
  // The SDK (its dependencies resolve beside it, under MODULES).
  resolve: {
    alias: {
      "@modelcontextprotocol/ext-apps": join(MODULES, "@modelcontextprotocol/ext-apps/dist/src/app.js"),
    },
  },
  plugins: [viteSingleFile({ removeViteModuleLoader: true })],
  build: {
    outDir: scratch,
    emptyOutDir: true,
    target: "es2022",
    reportCompressedSize: false,
    rollupOptions: { input: join(HERE, "src", "views.html") },
  },
});
mkdirSync(out, { recursive: true });
renameSync(join(scratch, "views.html"), join(out, "views.html"));
rmSync(scratch, { recursive: true, force: true });
