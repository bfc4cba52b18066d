import http from "node:http";
import type { AddressInfo } from "node:net";

/**
 * An OTLP/HTTP trace receiver on 127.0.0.1: what a collector's `/v1/traces` takes
 * from the OpenTelemetry SDK's own exporter. OTLP/JSON bodies are decoded with
 * JSON.parse (the protocol's JSON encoding: hex ids, attributes as `AnyValue`s);
 * protobuf bodies are kept raw (no decoder ships with the SDK).
 */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string | undefined;
  name: string;
  /** OTLP's numbering: 1 internal, 2 server, 3 client. */
  kind: number;
  startMs: number;
  endMs: number;
  attributes: Record<string, unknown>;
  status: { code?: number; message?: string };
  links: { traceId: string; spanId: string }[];
  resource: Record<string, unknown>;
}

export interface OtlpReceiver {
  url: string;
  /** Every export request, raw. */
  requests: { contentType: string; headers: http.IncomingHttpHeaders; body: Buffer }[];
  /** Every span of every OTLP/JSON export. */
  spans(): ReceivedSpan[];
  /** Everything exported, as text (JSON bodies as sent): for what must appear nowhere. */
  text(): string;
  close(): Promise<void>;
}

type AnyValue = { stringValue?: string; intValue?: string | number; doubleValue?: number; boolValue?: boolean; arrayValue?: { values?: AnyValue[] }; kvlistValue?: { values?: KeyValue[] }; bytesValue?: string };
type KeyValue = { key: string; value: AnyValue };

export function anyValue(v: AnyValue | undefined): unknown {
  if (!v) return undefined;
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.arrayValue) return (v.arrayValue.values ?? []).map(anyValue);
  if (v.kvlistValue) return attributes(v.kvlistValue.values);
  if (v.bytesValue !== undefined) return v.bytesValue;
  return undefined;
}

const attributes = (kvs: KeyValue[] | undefined): Record<string, unknown> => Object.fromEntries((kvs ?? []).map((kv) => [kv.key, anyValue(kv.value)]));
const ms = (nanos: string | number) => Number(BigInt(nanos) / 1_000_000n);

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const requests: OtlpReceiver["requests"] = [];
  const server = http.createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    if (req.method !== "POST" || req.url !== "/v1/traces") {
      res.writeHead(404).end();
      return;
    }
    const contentType = String(req.headers["content-type"] ?? "");
    requests.push({ contentType, headers: req.headers, body: Buffer.concat(chunks) });
    if (contentType.includes("json")) res.writeHead(200, { "content-type": "application/json" }).end("{}");
    else res.writeHead(200, { "content-type": "application/x-protobuf" }).end();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const json = () => requests.filter((r) => r.contentType.includes("json"));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    text: () => requests.map((r) => r.body.toString("utf8")).join("\n"),
    spans: () =>
      json().flatMap((r) => {
        const body = JSON.parse(r.body.toString("utf8")) as {
          resourceSpans?: { resource?: { attributes?: KeyValue[] }; scopeSpans?: { spans?: Record<string, unknown>[] }[] }[];
        };
        return (body.resourceSpans ?? []).flatMap((rs) =>
          (rs.scopeSpans ?? []).flatMap((ss) =>
            (ss.spans ?? []).map((s) => ({
              traceId: s.traceId as string,
              spanId: s.spanId as string,
              parentSpanId: (s.parentSpanId as string | undefined) || undefined,
              name: s.name as string,
              kind: s.kind as number,
              startMs: ms(s.startTimeUnixNano as string),
              endMs: ms(s.endTimeUnixNano as string),
              attributes: attributes(s.attributes as KeyValue[]),
              status: (s.status as ReceivedSpan["status"]) ?? {},
              links: ((s.links as { traceId: string; spanId: string }[]) ?? []).map((l) => ({ traceId: l.traceId, spanId: l.spanId })),
              resource: attributes(rs.resource?.attributes),
            })),
          ),
        );
      }),
    close: () => new Promise((r) => (server.closeAllConnections(), server.close(() => r()))),
  };
}
