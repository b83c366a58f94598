// Ponder looks for its config in its app folder; the project keeps it at the root.
export { default } from "../ponder.config.ts";
