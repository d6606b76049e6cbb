// `deno serve --port PORT --allow-read --allow-env deno-serve.mjs`: the package's default export
// is the server, unchanged.
export { default } from "ternflow";
