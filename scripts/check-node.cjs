// Runs before npm start, npm test, npm run provision and npm run bench (npm's pre-scripts), on
// whichever Node runs npm. Plain CommonJS that any Node parses, so that an old Node prints this
// one line instead of ERR_UNKNOWN_FILE_EXTENSION from the TypeScript that follows.
"use strict";

var NEED = [22, 12];

/** True when `version` (like "v20.20.2") is older than NEED. */
function tooOld(version) {
  var m = /^v?(\d+)\.(\d+)\./.exec(version);
  if (!m) return true;
  var major = Number(m[1]);
  var minor = Number(m[2]);
  return major < NEED[0] || (major === NEED[0] && minor < NEED[1]);
}

module.exports = { tooOld: tooOld };

if (require.main === module && tooOld(process.version)) {
  console.error(
    "gitea-edge-dispatcher needs Node.js >= " +
      NEED.join(".") +
      ", and this is " +
      process.version +
      ": " +
      "use `./run start` or `./run test` (they put Node 22 into ~/.cache/gdr), or install Node 22 from https://nodejs.org/",
  );
  process.exit(1);
}
