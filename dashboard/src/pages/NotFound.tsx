import { Link } from "react-router";

export function NotFound() {
  return (
    <section aria-labelledby="not-found-title">
      <h1 id="not-found-title">Page not found</h1>
      <p>
        Nothing lives at this address. <Link to="/">Go to your apps</Link>.
      </p>
    </section>
  );
}
