// Loaded into a real server process (NODE_OPTIONS=--import) by test/platform/malformed-input.test.ts, to make
// exceptions escape every handler the way a bug would: from a request's own work (a JSON body naming
// `__svc_escape_test__`, parsed while the request is handled) and from outside any request (SIGUSR2).
const parse = JSON.parse;
JSON.parse = function (text, reviver) {
  if (typeof text === "string" && text.includes("__svc_escape_test__")) {
    if (text.includes("rejection")) void Promise.reject(new Error("svc escape test: rejected in a request's work"));
    else
      setTimeout(() => {
        throw new Error("svc escape test: thrown in a request's work");
      }, 0);
  }
  return parse.call(this, text, reviver);
};
process.on("SIGUSR2", () => {
  setTimeout(() => {
    throw new Error("svc escape test: thrown outside any request");
  }, 0);
});
