// autocannon setupRequest (loaded with require() in its worker thread): every request is a
// bill the service has never seen. "BILL_SEQ" in the body becomes a billersCode unique to
// this worker (a random prefix, so a warm-up run and the measured run never share bills).
const prefix = require("node:crypto").randomBytes(4).toString("hex");
let n = 0;
module.exports = (req) => ({ ...req, body: req.body.replace("BILL_SEQ", `${prefix}-${++n}`) });
