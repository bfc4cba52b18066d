import { newIdempotencyKey, seg, type RequestOptions } from "./client.js";
import { MalformedEventError } from "./errors.js";
import { JsonFrameStream, openCreatedStream, Resource } from "./resources.js";
import type { ResponseCreateParams, ResponseDeleted, ResponseInputItemList, ResponseInputItemsParams, ResponseObject, ResponseStreamEvent } from "./wire.js";

/**
 * A streamed response: `for await` over its events (typed by `type`), from
 * `response.created` to `response.completed`, `response.incomplete` or
 * `response.failed`; the stream ends at `data: [DONE]`. `final` is the
 * response as it ended, once iterated.
 */
export class ResponseStream extends JsonFrameStream<ResponseStreamEvent> {
  /** The response as its final event gave it (null until then, or when the stream broke first). */
  final: ResponseObject | null = null;

  /** @internal */
  constructor(response: Response, signal?: AbortSignal) {
    super(response, signal, "a response event");
  }

  protected override seen(event: ResponseStreamEvent): void {
    if (event.type === "response.completed" || event.type === "response.incomplete" || event.type === "response.failed") this.final = event.response;
  }

  /** Reads the stream to its end: the response as it ended. */
  async done(): Promise<ResponseObject> {
    for await (const _ of this) void _;
    if (!this.final) throw new MalformedEventError("svc: the response's stream ended before its final event; read it with svc.responses.retrieve(id).");
    return this.final;
  }
}

/**
 * `svc.responses`: the Responses API (Open Responses, OpenAI's `POST /v1/responses`),
 * with the end user (`user` or `safety_identifier`) required. Function tools are the
 * caller's: a response that calls one ends with its `function_call` items; run them and
 * send `function_call_output` items in the next request, with `previous_response_id`.
 */
export class Responses extends Resource {
  /**
   * `POST /v1/responses`, with an `Idempotency-Key` (`options.idempotencyKey`, or a
   * random one) kept across its retries. With `stream: true` it resolves once the
   * stream's headers are in, to a `ResponseStream` of typed events.
   */
  create(params: ResponseCreateParams & { stream: true }, options?: RequestOptions): Promise<ResponseStream>;
  create(params: ResponseCreateParams & { stream?: false | null }, options?: RequestOptions): Promise<ResponseObject>;
  create(params: ResponseCreateParams, options?: RequestOptions): Promise<ResponseObject | ResponseStream>;
  async create(params: ResponseCreateParams, options: RequestOptions = {}): Promise<ResponseObject | ResponseStream> {
    const idempotencyKey = options.idempotencyKey ?? newIdempotencyKey();
    if (!params.stream) return this.api.request({ method: "POST", path: "/responses", body: params, options: { ...options, idempotencyKey } });
    return new ResponseStream(await openCreatedStream(this.api, "/responses", params, idempotencyKey, options), options.signal);
  }

  /** `GET /v1/responses/:id`: a stored response as it stands. With `user`, another user's response is `NotFoundError` too. */
  retrieve(id: string, params: { user?: string } = {}, options?: RequestOptions): Promise<ResponseObject> {
    return this.api.request({ method: "GET", path: `/responses/${seg(id)}`, query: { user: params.user }, options });
  }

  /** `DELETE /v1/responses/:id`: its input and output are deleted (its run record and ledger rows stay). */
  delete(id: string, params: { user?: string } = {}, options?: RequestOptions): Promise<ResponseDeleted> {
    return this.api.request({ method: "DELETE", path: `/responses/${seg(id)}`, query: { user: params.user }, options });
  }

  /** `GET /v1/responses/:id/input_items`: a page of the request's input items (newest first unless `order: "asc"`). */
  inputItems(id: string, params: ResponseInputItemsParams = {}, options?: RequestOptions): Promise<ResponseInputItemList> {
    return this.api.request({ method: "GET", path: `/responses/${seg(id)}/input_items`, query: { ...params }, options });
  }
}
