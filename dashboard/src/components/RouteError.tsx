import { isRouteErrorResponse, useRouteError } from "react-router";
import { NotFound } from "../pages/NotFound";

/** A module a page needed did not load (Chromium, Firefox and Safari word it differently). */
const MODULE_FAILED = /dynamically imported module|importing a module script failed|error loading dynamically imported module/i;

/**
 * What a page that failed shows instead of a blank page or a stack: what happened in words, and a reload.
 * A page's chunk that will not load is most likely one a newer build replaced while this tab was open.
 */
export function RouteError() {
  const error = useRouteError();
  if (isRouteErrorResponse(error) && error.status === 404) return <NotFound />;
  const message = error instanceof Error ? error.message : isRouteErrorResponse(error) ? `${error.status} ${error.statusText}` : String(error);
  const stale = MODULE_FAILED.test(message);
  return (
    <section aria-labelledby="route-error-title">
      <h1 id="route-error-title">{stale ? "This page could not be loaded" : "Something went wrong on this page"}</h1>
      <div role="alert" className="notice notice-error">
        {stale ? "The dashboard has probably been updated since this tab opened it, or the connection dropped." : message}
      </div>
      <button type="button" className="primary" onClick={() => window.location.reload()}>
        Reload the page
      </button>
    </section>
  );
}
