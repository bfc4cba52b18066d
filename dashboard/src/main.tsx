import { createRoot } from "react-dom/client";
createRoot(document.getElementById("root")!).render(<main><h1>svc dashboard</h1></main>);
