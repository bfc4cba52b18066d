import { newIdempotencyKey, seg, type RequestOptions, type Transport } from "./client.js";
import { mayRetry, openEventStream, retryDelayMs, sleep } from "./http.js";
import { PagePromise } from "./pagination.js";
import { readSse } from "./sse.js";
import { MalformedEventError } from "./errors.js";
import type {
  BillingAccount,
  BillingConnectParams,
  BillingConnectStart,
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionCreateParams,
  Compute,
  CreatedWebhookEndpoint,
  Machine,
  MachineRemoved,
  ModelList,
  PageBody,
  Plan,
  PlanCreateParams,
  PlanList,
  PlanUpdateParams,
  Session,
  SessionCreateParams,
  SessionsEnded,
  UsageListParams,
  UsageRow,
  User,
  WebhookDelivery,
  WebhookDeliveryListParams,
  WebhookEndpoint,
  WebhookEndpointCreateParams,
} from "./wire.js";

/** What every resource is built on. */
export abstract class Resource {
  /** @internal */
  protected readonly api: Transport;
  /** @internal */
  constructor(api: Transport) {
    this.api = api;
  }
}

/** `svc.users`: an end user's plan, allowance, usage and compute (the app key's environment). */
export class Users extends Resource {
  /** `GET /v1/users/:id`: plan, allowance, usage this period, what is connected. An id never seen is `NotFoundError`. */
  retrieve(id: string, options?: RequestOptions): Promise<User> {
    return this.api.request({ method: "GET", path: `/users/${seg(id)}`, options });
  }

  /** `GET /v1/users/:id/compute`: the user's machines, their runtimes, cost classes and live state. */
  compute(id: string, options?: RequestOptions): Promise<Compute> {
    return this.api.request({ method: "GET", path: `/users/${seg(id)}/compute`, options });
  }

  /** `PUT /v1/users/:id/plan`: puts the user on a plan without a payment; `null` returns them to the default plan. */
  setPlan(id: string, plan: string | null, options?: RequestOptions): Promise<User> {
    return this.api.request({ method: "PUT", path: `/users/${seg(id)}/plan`, body: { plan }, options });
  }
}

/** `svc.machines`: a user's paired machines. */
export class Machines extends Resource {
  /** The user's machines (`users.compute(user).machines`). */
  async list(user: string, options?: RequestOptions): Promise<Machine[]> {
    const compute: Compute = await this.api.request({ method: "GET", path: `/users/${seg(user)}/compute`, options });
    return compute.machines;
  }

  /** `DELETE /v1/users/:id/machines/:machineId`: its pairing token stops working at once; its runs fail. Another user's machine is `NotFoundError`. */
  remove(user: string, machineId: string, options?: RequestOptions): Promise<MachineRemoved> {
    return this.api.request({ method: "DELETE", path: `/users/${seg(user)}/machines/${seg(machineId)}`, options });
  }
}

/** `svc.usage`: the ledger's rows. */
export class Usage extends Resource {
  /**
   * `GET /v1/usage`, in id order, filtered by `user`, `run`, `costClass`, `period`,
   * `environment`. `await` it for the first page (`limit` rows, default 100), or
   * `for await (const row of svc.usage.list({ user }))` for every row, page after page.
   */
  list(params: UsageListParams = {}, options?: RequestOptions): PagePromise<UsageRow> {
    const { cursor, ...filters } = params;
    return new PagePromise((after) => this.api.request<PageBody<UsageRow>>({ method: "GET", path: "/usage", query: { ...filters, cursor: after }, options }), cursor);
  }
}

/** `svc.plans`: the plans the app sells (also `svc plans ...` on the command line). */
export class Plans extends Resource {
  /** `GET /v1/plans`: the plans on sale; archived ones too with `archived: true`. */
  list(params: { archived?: boolean } = {}, options?: RequestOptions): Promise<PlanList> {
    return this.api.request({ method: "GET", path: "/plans", query: { archived: params.archived }, options });
  }

  /** `POST /v1/plans`. A slug taken is `ConflictError` (`plan_exists`). Not retried unless `options.idempotencyKey` is given. */
  create(params: PlanCreateParams, options?: RequestOptions): Promise<Plan> {
    return this.api.request({ method: "POST", path: "/plans", body: params, options });
  }

  /** `PATCH /v1/plans/:slug`: only the fields given change. */
  update(slug: string, params: PlanUpdateParams, options?: RequestOptions): Promise<Plan> {
    return this.api.request({ method: "PATCH", path: `/plans/${seg(slug)}`, body: params, options });
  }

  /** `DELETE /v1/plans/:slug`: no longer sold nor the default; its subscribers keep it. */
  archive(slug: string, options?: RequestOptions): Promise<Plan> {
    return this.api.request({ method: "DELETE", path: `/plans/${seg(slug)}`, options });
  }
}

/** `svc.sessions`: end-user browser sessions for the hosted connect and billing pages. */
export class Sessions extends Resource {
  /** `POST /v1/end_users/session`: a ten-minute session acting for exactly `user`; send their browser to `url` (or `billing_url`). */
  create(params: SessionCreateParams, options?: RequestOptions): Promise<Session> {
    return this.api.request({ method: "POST", path: "/end_users/session", body: params, options });
  }

  /** `DELETE /v1/end_users/session`: ends every live session of `user`. */
  end(user: string, options?: RequestOptions): Promise<SessionsEnded> {
    return this.api.request({ method: "DELETE", path: "/end_users/session", query: { user }, options });
  }
}

/** `svc.models`. */
export class Models extends Resource {
  /** `GET /v1/models`: what can be asked for (with `user`: what that user's machines serve). */
  list(params: { user?: string } = {}, options?: RequestOptions): Promise<ModelList> {
    return this.api.request({ method: "GET", path: "/models", query: { user: params.user }, options });
  }
}

/**
 * A `text/event-stream` of JSON frames that ends at `data: [DONE]` (a streamed chat
 * completion or response): iterated once, each frame parsed.
 */
export abstract class JsonFrameStream<T> implements AsyncIterable<T> {
  /** The run behind it (`Service-Run-Id`). */
  readonly runId: string | null;
  readonly #response: Response;
  readonly #signal: AbortSignal | undefined;
  #iterated = false;

  /** @internal */
  constructor(
    response: Response,
    signal: AbortSignal | undefined,
    /** What one frame is, for errors: "a chat completion chunk". */
    private readonly frameName: string,
  ) {
    this.#response = response;
    this.#signal = signal;
    this.runId = response.headers.get("service-run-id");
  }

  /** Each frame as it is handed over. */
  protected seen(_frame: T): void {}

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    if (this.#iterated) throw new Error(`svc: a stream of ${this.frameName}s can be iterated only once.`);
    this.#iterated = true;
    for await (const frame of readSse(this.#response.body!, this.#signal)) {
      if (frame.data === "[DONE]") return;
      let parsed: T;
      try {
        parsed = JSON.parse(frame.data) as T;
      } catch {
        throw new MalformedEventError(`svc: ${this.frameName} is not JSON: ${frame.data.slice(0, 200)}`);
      }
      this.seen(parsed);
      yield parsed;
    }
  }
}

/** A streamed chat completion: `for await` over its chunks; the stream ends at `data: [DONE]`. */
export class ChatCompletionStream extends JsonFrameStream<ChatCompletionChunk> {
  /** @internal */
  constructor(response: Response, signal?: AbortSignal) {
    super(response, signal, "a chat completion chunk");
  }
}

/** `svc.chat.completions`: OpenAI-compatible chat completions, with `user` required. */
export class ChatCompletions extends Resource {
  /**
   * `POST /v1/chat/completions`, with an `Idempotency-Key` (`options.idempotencyKey`,
   * or a random one) kept across its retries. With `stream: true` it resolves once the
   * stream's headers are in, to a `ChatCompletionStream` of chunks.
   */
  create(params: ChatCompletionCreateParams & { stream: true }, options?: RequestOptions): Promise<ChatCompletionStream>;
  create(params: ChatCompletionCreateParams & { stream?: false | null }, options?: RequestOptions): Promise<ChatCompletion>;
  create(params: ChatCompletionCreateParams, options?: RequestOptions): Promise<ChatCompletion | ChatCompletionStream>;
  async create(params: ChatCompletionCreateParams, options: RequestOptions = {}): Promise<ChatCompletion | ChatCompletionStream> {
    const idempotencyKey = options.idempotencyKey ?? newIdempotencyKey();
    if (!params.stream) return this.api.request({ method: "POST", path: "/chat/completions", body: params, options: { ...options, idempotencyKey } });
    return new ChatCompletionStream(await openCreatedStream(this.api, "/chat/completions", params, idempotencyKey, options), options.signal);
  }
}

/**
 * POSTs a create that answers with a stream (`stream: true`), under one
 * `Idempotency-Key` across its retries: resolves once the stream's headers are in.
 */
export async function openCreatedStream(api: Transport, path: string, body: unknown, idempotencyKey: string, options: RequestOptions): Promise<Response> {
  const signal = options.signal ?? new AbortController().signal;
  const http = { ...api.http, ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}) };
  const maxRetries = options.maxRetries ?? http.maxRetries;
  for (let attempt = 0; ; attempt++) {
    try {
      return await openEventStream(http, { method: "POST", path, body, headers: { "idempotency-key": idempotencyKey } }, signal);
    } catch (err) {
      if (attempt >= maxRetries || !mayRetry(err, "create")) throw err;
      await sleep(retryDelayMs(attempt, err), signal);
    }
  }
}

export class Chat extends Resource {
  readonly completions = new ChatCompletions(this.api);
}

/** `svc.billing`: the app's own Stripe account (connected through Stripe Connect). */
export class Billing extends Resource {
  /** `GET /v1/billing/account`: the account connected for this environment and its state at Stripe. */
  retrieveAccount(options?: RequestOptions): Promise<BillingAccount> {
    return this.api.request({ method: "GET", path: "/billing/account", options });
  }

  /** `POST /v1/billing/connect`: the `url` to send the app owner's browser to (Stripe OAuth, or a created account's onboarding). */
  connect(params: BillingConnectParams, options?: RequestOptions): Promise<BillingConnectStart> {
    return this.api.request({ method: "POST", path: "/billing/connect", body: params, options });
  }

  /** `DELETE /v1/billing/account`: detaches the account; checkout stops. */
  disconnect(options?: RequestOptions): Promise<BillingAccount> {
    return this.api.request({ method: "DELETE", path: "/billing/account", options });
  }
}

/** `svc.webhookEndpoints`: where the service sends its webhooks (signed per Standard Webhooks). */
export class WebhookEndpoints extends Resource {
  /** `POST /v1/webhook_endpoints`: answers the `whsec_` signing secret, once. */
  create(params: WebhookEndpointCreateParams, options?: RequestOptions): Promise<CreatedWebhookEndpoint> {
    return this.api.request({ method: "POST", path: "/webhook_endpoints", body: params, options });
  }

  list(options?: RequestOptions): Promise<{ data: WebhookEndpoint[] }> {
    return this.api.request({ method: "GET", path: "/webhook_endpoints", options });
  }

  /** `DELETE /v1/webhook_endpoints/:id`: disables it (it stays listed, its log readable). */
  remove(id: string, options?: RequestOptions): Promise<WebhookEndpoint> {
    return this.api.request({ method: "DELETE", path: `/webhook_endpoints/${seg(id)}`, options });
  }
}

/** `svc.webhookDeliveries`: the delivery log, newest first. */
export class WebhookDeliveries extends Resource {
  /** `GET /v1/webhook_deliveries`: `await` for a page, `for await` for every delivery. */
  list(params: WebhookDeliveryListParams = {}, options?: RequestOptions): PagePromise<WebhookDelivery> {
    const { cursor, ...filters } = params;
    return new PagePromise((after) => this.api.request<PageBody<WebhookDelivery>>({ method: "GET", path: "/webhook_deliveries", query: { ...filters, cursor: after }, options }), cursor);
  }
}
