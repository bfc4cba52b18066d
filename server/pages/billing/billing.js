// The hosted billing page: the plans component and the compute-status component
// for one end user, in a session the app minted for them. The session token
// arrives in the URL fragment (never sent to any server), is kept in this tab's
// sessionStorage (so the page still works when Stripe sends the browser back)
// and taken out of the address bar at once.

const SESSION_KEY = "svc.session";

const $ = (id) => document.getElementById(id);

const fragment = new URLSearchParams(location.hash.slice(1));
if (fragment.get("session")) sessionStorage.setItem(SESSION_KEY, fragment.get("session"));
if (location.hash) history.replaceState(null, "", location.pathname + location.search);
const token = sessionStorage.getItem(SESSION_KEY);

const query = new URLSearchParams(location.search);
const outcome = query.get("checkout");
const fromPortal = query.get("portal") === "return";
if (outcome === "success" || outcome === "cancel" || fromPortal) {
  $("checkout-result").textContent =
    outcome === "success"
      ? "Thank you! Your new plan shows here as soon as the payment is confirmed."
      : outcome === "cancel"
        ? "Checkout was cancelled: nothing was charged."
        : "Back from your subscription settings: any change shows here as soon as Stripe confirms it.";
  $("checkout-result").hidden = false;
}

if (!token) {
  $("notice").textContent = "Open this page from the app: only the app can say who you are.";
  $("notice").hidden = false;
} else {
  const plans = document.createElement("svc-plans");
  const compute = document.createElement("svc-compute-status");
  for (const el of [plans, compute]) {
    el.setAttribute("session", token);
    el.setAttribute("base-url", location.origin);
    el.addEventListener("svc-error", (e) => {
      if (e.detail.status === 401) sessionStorage.removeItem(SESSION_KEY);
    });
  }
  $("plans").append(plans);
  $("compute").append(compute);
  $("plans-section").hidden = false;
  $("compute-section").hidden = false;
  if (outcome === "success" || fromPortal) {
    // Stripe's webhook may land a moment after the browser: look again shortly.
    setTimeout(() => plans.load(), 3000);
  }
}
