// bench-webhook's peer: @octokit/webhooks' node middleware (the receiver Probot is built on)
// on loopback. It verifies each delivery's X-Hub-Signature-256 against WEBHOOK_SECRET, parses
// it, dispatches it to a handler and answers 200; it stores nothing.
// Prints "listening PORT" once ready; exits when stdin closes (the bench's end).
import http from "node:http";
import { Webhooks, createNodeMiddleware } from "@octokit/webhooks";

const secret = process.env.WEBHOOK_SECRET;
if (!secret) {
  console.error("WEBHOOK_SECRET is not set");
  process.exit(2);
}
const webhooks = new Webhooks({ secret });
let received = 0;
webhooks.on("issues.labeled", () => {
  received += 1;
});
const middleware = createNodeMiddleware(webhooks, { path: "/webhook" });
const server = http.createServer(async (req, res) => {
  if (req.method === "GET" && req.url === "/count") {
    res.writeHead(200, { "content-type": "text/plain" });
    res.end(`${received}\n`);
    return;
  }
  if (!(await middleware(req, res))) {
    res.writeHead(404);
    res.end();
  }
});
server.keepAliveTimeout = 60_000;
server.listen(Number(process.env.PORT || 0), "127.0.0.1", () => {
  console.log(`listening ${server.address().port}`);
});
process.stdin.resume();
process.stdin.on("end", () => process.exit(0));
