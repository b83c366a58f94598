/**
 * A WebSocket server that takes the upgrade (RFC 6455 4.2.2: the accept key from the
 * client's) and then answers nothing, not even the closing handshake: a node, or a proxy in
 * front of one, gone mute after the connection. What reaches it is read and dropped, so a
 * client that cuts its connection is seen to.
 */
import { createHash } from "node:crypto";
import { createServer, type Socket } from "node:net";
import type { AddressInfo } from "node:net";

const RFC6455_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

export interface MuteWebSocket {
  url: string;
  /** Every connection made to it so far. */
  connections: Socket[];
  /** The connections on which a text frame arrived after the upgrade (the client used the socket). */
  framesAfterUpgrade(): number;
  /** The connections still open from the client's side. */
  openConnections(): number;
  close(): Promise<void>;
}

export async function startMuteWebSocket(): Promise<MuteWebSocket> {
  const connections: Socket[] = [];
  let frames = 0;
  const server = createServer((socket) => {
    connections.push(socket.on("error", () => {}));
    let request = "";
    let upgraded = false;
    socket.on("data", (chunk) => {
      if (upgraded) {
        if (chunk[0] === 0x81) frames += 1; // FIN + text
        return;
      }
      request += chunk.toString("latin1");
      if (!request.includes("\r\n\r\n")) return;
      upgraded = true;
      const key = /sec-websocket-key: *(\S+)/i.exec(request)?.[1] ?? "";
      const accept = createHash("sha1").update(`${key}${RFC6455_GUID}`).digest("base64");
      socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `ws://127.0.0.1:${(server.address() as AddressInfo).port}`,
    connections,
    framesAfterUpgrade: () => frames,
    openConnections: () => connections.filter((c) => !c.destroyed && !c.readableEnded).length,
    close: async () => {
      for (const c of connections) c.destroy();
      await new Promise((r) => server.close(r));
    },
  };
}
