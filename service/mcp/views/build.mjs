// Builds each view into one self-contained HTML document (vite-plugin-singlefile): the
// script and style inlined, nothing loaded from anywhere at run time.
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

// Each view: its entry module in src/ and its title; src/view.html is the page of all three.
export const VIEWS = {
  execution: "Execution",
  "execution-stats": "Execution statistics",
  executions: "Executions",
};
const out = resolve(process.argv[2] ?? join(HERE, "built"));
const scratch = join(out, ".vite");

for (const [view, title] of Object.entries(VIEWS)) {
  const page = {
    name: "elova-view-page",
    transformIndexHtml: {
      order: "pre",
      handler: (html) => html.replaceAll("%VIEW%", view).replaceAll("%TITLE%", title),
    },
  };
  await build({
    root: join(HERE, "src"),
    configFile: false,
    logLevel: "warn",
    // The SDK (its dependencies resolve beside it, under MODULES).
    resolve: {
      alias: {
        "@modelcontextprotocol/ext-apps": join(
          MODULES,
          "@modelcontextprotocol/ext-apps/dist/src/app.js",
        ),
      },
    },
    plugins: [page, viteSingleFile({ removeViteModuleLoader: true })],
    build: {
      outDir: scratch,
      emptyOutDir: true,
      target: "es2022",
      reportCompressedSize: false,
      rollupOptions: { input: join(HERE, "src", "view.html") },
    },
  });
  mkdirSync(out, { recursive: true });
  renameSync(join(scratch, "view.html"), join(out, `${view}.html`));
}
rmSync(scratch, { recursive: true, force: true });
