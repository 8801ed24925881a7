// @grafana/ui's .mjs files import react-custom-scrollbars-2 (CommonJS, Babel's __esModule
// default) by its default export; esbuild gives an .mjs importer Node's reading of CommonJS
// (module.exports, not .default), so the bundle resolves the package here, in a .js file,
// where esbuild reads the default as Babel meant it (webpack, Grafana's bundler, does so).
import Scrollbars from './node_modules/react-custom-scrollbars-2/lib/index.js';
export default Scrollbars;
export { Scrollbars };
