import { randomUUID } from "node:crypto";
import { context, diag, DiagLogLevel, trace, type DiagLogger, type TextMapPropagator, type Tracer } from "@opentelemetry/api";
import type { Logger } from "../logger.js";
import type { TelemetryConfig, TracesConfig } from "./config.js";

/**
 * The OpenTelemetry SDK of the process, started from the configuration and shut
 * down (its spans flushed) when the server closes. Traces are off by default: then
 * nothing here is loaded beyond `@opentelemetry/api`, whose tracer is a no-op, and
 * every helper in this folder returns at its first line (`tracingOn()` false).
 *
 * On, the SDK is registered globally, as OpenTelemetry means it (one tracer
 * provider and one context manager per process: anything else using
 * `@opentelemetry/api` joins the same traces). A second server started in the same
 * process (tests) shares it, with the first one's settings, until the last one
 * closes. A process where another SDK is registered already (an operator's
 * `--import` of their own set-up) keeps that one: our spans go to it.
 */

interface Tracing {
  refs: number;
  captureContent: boolean;
  propagator: TextMapPropagator;
  shutdown(): Promise<void>;
}

let state: Tracing | null = null;

/** Are spans recorded in this process? False: every helper returns before doing anything (zero cost). */
export function tracingOn(): boolean {
  return state !== null;
}

/** May prompts, outputs and tool arguments go into spans (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`)? */
export function contentCaptured(): boolean {
  return state?.captureContent ?? false;
}

/** The W3C trace-context propagator (`traceparent`, `tracestate`), while tracing is on. */
export function propagator(): TextMapPropagator | null {
  return state?.propagator ?? null;
}

/** The service's tracer: the registered SDK's, or the API's no-op one (looked up each time: a provider may come and go in tests). */
export function tracer(): Tracer {
  return trace.getTracer("svc");
}

/** How long a shutdown waits for the last spans to reach the collector (a collector that is gone must not hold the process). */
const SHUTDOWN_WAIT_MS = 5_000;

/**
 * Starts tracing as `config` says (nothing when it is off) and returns what the
 * server's close calls: the SDK's shutdown, which exports the spans still queued.
 */
export async function startTracing(config: TelemetryConfig, logger: Logger): Promise<() => Promise<void>> {
  const traces = config.traces;
  if (!traces) return async () => {};
  if (state) {
    state.refs++;
    logger.info("OpenTelemetry tracing already runs in this process: this server shares it");
    return release(state);
  }
  const started = await startSdk(traces, config.captureContent, logger);
  state = started;
  logger.info({ endpoint: redactedUrl(traces.url), protocol: traces.protocol, serviceName: traces.resource["service.name"], captureContent: config.captureContent }, "OpenTelemetry traces on");
  return release(started);
}

function release(s: Tracing): () => Promise<void> {
  let released = false;
  return async () => {
    if (released) return;
    released = true;
    if (--s.refs > 0) return;
    if (state === s) state = null;
    await s.shutdown();
  };
}

async function startSdk(traces: TracesConfig, captureContent: boolean, logger: Logger): Promise<Tracing> {
  // Loaded only when traces are on: a service without them pays for none of it.
  const [sdk, { resourceFromAttributes }, { AsyncLocalStorageContextManager }, { W3CTraceContextPropagator }, exporters] = await Promise.all([
    import("@opentelemetry/sdk-trace"),
    import("@opentelemetry/resources"),
    import("@opentelemetry/context-async-hooks"),
    import("@opentelemetry/core"),
    traces.protocol === "http/json" ? import("@opentelemetry/exporter-trace-otlp-http") : import("@opentelemetry/exporter-trace-otlp-proto"),
  ]);
  type ExporterOptions = NonNullable<ConstructorParameters<typeof exporters.OTLPTraceExporter>[0]>;
  const exporter = new exporters.OTLPTraceExporter({
    url: traces.url,
    headers: traces.headers,
    ...(traces.timeoutMs ? { timeoutMillis: traces.timeoutMs } : {}),
    ...(traces.compression ? { compression: traces.compression as ExporterOptions["compression"] } : {}),
  });
  const { name, ratio } = traces.sampler;
  const ratioSampler = () => new sdk.TraceIdRatioBasedSampler(ratio);
  const root = name.endsWith("always_off") ? new sdk.AlwaysOffSampler() : name.endsWith("traceidratio") ? ratioSampler() : new sdk.AlwaysOnSampler();
  const provider = new sdk.TracerProvider({
    resource: resourceFromAttributes({ "service.instance.id": randomUUID(), ...traces.resource }),
    sampler: name.startsWith("parentbased_") ? new sdk.ParentBasedSampler({ root }) : root,
    spanProcessors: [new sdk.BatchSpanProcessor({ exporter, ...traces.batch })],
  });
  const contextManager = new AsyncLocalStorageContextManager().enable();
  // The SDK's own troubles (a collector that refuses or is unreachable) reach the log, at most once a minute.
  diag.setLogger(throttled(logger), { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true });
  const ours = trace.setGlobalTracerProvider(provider);
  const ownContext = context.setGlobalContextManager(contextManager);
  if (!ours) {
    logger.warn("another OpenTelemetry SDK is registered in this process: the service's spans go to its tracer provider");
    await provider.shutdown();
  }
  if (!ownContext) contextManager.disable();
  return {
    refs: 1,
    captureContent,
    propagator: new W3CTraceContextPropagator(),
    async shutdown() {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<"late">((resolve) => (timer = setTimeout(() => resolve("late"), SHUTDOWN_WAIT_MS)));
      const done = ours ? provider.shutdown().then(() => "ok" as const, () => "failed" as const) : Promise.resolve("ok" as const);
      const how = await Promise.race([done, late]);
      clearTimeout(timer);
      if (how !== "ok") logger.warn({ how }, "OpenTelemetry: the last spans could not all be exported at shutdown");
      if (ours) trace.disable();
      if (ownContext) context.disable();
      diag.disable();
    },
  };
}

/** The collector's URL without credentials a user may have put in it. */
function redactedUrl(url: string): string {
  const u = new URL(url);
  u.username = "";
  u.password = "";
  u.search = "";
  return u.toString();
}

/** The SDK's diagnostic messages as warnings in the service's log: at most one a minute, with how many were left out. */
function throttled(logger: Logger): DiagLogger {
  let last = 0;
  let skipped = 0;
  const say = (message: string, ...args: unknown[]) => {
    const now = Date.now();
    if (now - last < 60_000) return void skipped++;
    last = now;
    const detail = args.map((a) => (a instanceof Error ? a.message : typeof a === "string" ? a : JSON.stringify(a) ?? String(a))).join(" ").slice(0, 500);
    logger.warn({ skipped, detail: detail || undefined }, `OpenTelemetry: ${errorText(String(message)).slice(0, 300)}`);
    skipped = 0;
  };
  return { error: say, warn: say, info: () => {}, debug: () => {}, verbose: () => {} };
}

/** The SDK's error handler hands over an error as its JSON (stack included): its message is what the log needs. */
function errorText(message: string): string {
  if (!message.startsWith("{")) return message;
  try {
    const e = JSON.parse(message) as { message?: unknown; code?: unknown };
    return typeof e.message === "string" ? `${e.message}${typeof e.code === "string" && !e.message.includes(e.code) ? ` (${e.code})` : ""}` : message;
  } catch {
    return message;
  }
}
