import { createContext, useContext, type ReactNode } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import type { z } from "zod";
import type { OwnerMe } from "@svc/contract";
import { api, call, isUnauthorized, setCsrfToken } from "./client";

export type Me = z.infer<typeof OwnerMe>;

export const ME_KEY = ["owner", "me"] as const;

/** The signed-in owner, or null when the session is missing or ended (401). */
export function useMe() {
  return useQuery({
    queryKey: ME_KEY,
    queryFn: async (): Promise<Me | null> => {
      try {
        const me = await call(api.ownerMe());
        setCsrfToken(me.csrfToken);
        return me;
      } catch (err) {
        if (isUnauthorized(err)) {
          setCsrfToken(null);
          return null;
        }
        throw err;
      }
    },
    staleTime: 60_000,
  });
}

/** After any sign-in: the answer is the session, no second request. */
export function useSignedIn() {
  const client = useQueryClient();
  return (me: Me) => {
    setCsrfToken(me.csrfToken);
    client.clear();
    client.setQueryData(ME_KEY, me);
  };
}

export function useSignOut(everywhere: boolean) {
  const client = useQueryClient();
  return useMutation({
    mutationFn: () => call(everywhere ? api.ownerSignOutEverywhere() : api.ownerSignOut()),
    onSettled: () => {
      setCsrfToken(null);
      client.clear();
      client.setQueryData(ME_KEY, null);
    },
  });
}

const SessionContext = createContext<Me | null>(null);

export function SessionProvider({ me, children }: { me: Me; children: ReactNode }) {
  return <SessionContext.Provider value={me}>{children}</SessionContext.Provider>;
}

/** The session inside the signed-in part of the dashboard. */
export function useSession(): Me {
  const me = useContext(SessionContext);
  if (!me) throw new Error("useSession outside a signed-in page");
  return me;
}
