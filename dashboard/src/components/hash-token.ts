import { useEffect, useState } from "react";

/**
 * A one-time token handed over in the URL's fragment (`#token=olt_...`): read once, then
 * wiped from the address bar and history, so it is never bookmarked, shared or sent anywhere.
 */
export function useHashToken(prefix: string): string | null {
  const [token] = useState(() => {
    const value = new URLSearchParams(window.location.hash.slice(1)).get("token");
    return value && value.startsWith(prefix) ? value : null;
  });
  useEffect(() => {
    if (window.location.hash) window.history.replaceState(window.history.state, "", window.location.pathname + window.location.search);
  }, []);
  return token;
}
