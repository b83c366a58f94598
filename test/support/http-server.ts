/** Serving a Hono app on a free loopback port for a test: the project's own helper. */
export { listen } from "../../stack/service-stack.ts";
