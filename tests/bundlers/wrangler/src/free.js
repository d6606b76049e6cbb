// The Free-plan build: the wasm bundled, the model fetched from TERNFLOW_MODEL_URL at run time.
export { default } from "ternflow/edge/remote-model";
