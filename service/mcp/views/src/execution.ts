import { start } from "./common";
import { renderExecution } from "./execution-render";

const root = document.getElementById("app")!;
start("elova-execution", root, (data) => renderExecution(root, data));
