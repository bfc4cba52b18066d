import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { QueryCache, QueryClient, QueryClientProvider, MutationCache } from "@tanstack/react-query";
import { RouterProvider } from "react-router";
import { ApiFailure, isUnauthorized } from "./api/client";
import { ME_KEY } from "./api/session";
import { router } from "./routes";
import "./styles.css";

// A 401 anywhere means the session ended: reading `me` again finds it gone, and the guard sends the owner to sign in.
const onError = (err: unknown) => {
  if (isUnauthorized(err)) void queryClient.invalidateQueries({ queryKey: ME_KEY });
};
const queryClient: QueryClient = new QueryClient({
  queryCache: new QueryCache({ onError }),
  mutationCache: new MutationCache({ onError }),
  defaultOptions: {
    queries: {
      refetchOnWindowFocus: false,
      // A refusal (4xx, 501) will not change by asking again; a network failure or 5xx might.
      retry: (failures, err) => failures < 2 && !(err instanceof ApiFailure && err.status > 0 && (err.status < 500 || err.status === 501)),
    },
  },
});

createRoot(document.getElementById("root")!).render(
  <StrictMode>
    <QueryClientProvider client={queryClient}>
      <RouterProvider router={router} />
    </QueryClientProvider>
  </StrictMode>,
);
