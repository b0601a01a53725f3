// Prints yes when a node version (the argument, or this node's) satisfies package.json's
// engines.node, written ">=MAJOR.MINOR.PATCH <MAJOR", and no otherwise. The Makefile asks it
// about the machine's node before anything is installed, so it uses no package and no syntax an
// old node would refuse (an old node must get its answer, not a syntax error).
'use strict';
var path = require('path');
var range = require(path.join(__dirname, '..', 'package.json')).engines.node;
var bounds = /^>=(\d+)\.(\d+)\.(\d+) <(\d+)$/.exec(range);
if (!bounds) {
  console.error('package.json engines.node is "' + range + '"; this script reads only ">=MAJOR.MINOR.PATCH <MAJOR"');
  process.exit(2);
}
var version = (process.argv[2] || process.versions.node).split('.').map(Number);
var minimum = bounds.slice(1, 4).map(Number);
var belowMajor = Number(bounds[4]);
var order = 0;
for (var i = 0; i < 3 && order === 0; i++) order = version[i] - minimum[i];
console.log(order >= 0 && version[0] < belowMajor ? 'yes' : 'no');
