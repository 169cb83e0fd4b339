// The review page's calls to its server (JSON; a refusal becomes an Error with the server's message
// and status) and the one line that tells the user what happened.
export const $ = (id) => document.getElementById(id);

export function say(message, kind = "error") {
  const alert = $("alert");
  alert.textContent = message;
  alert.className = kind === "error" ? "" : "info";
  alert.hidden = !message;
}

export async function api(path, body) {
  const options = body === undefined ? {} : {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
  };
  let answer;
  try {
    answer = await fetch(path, options);
  } catch {
    throw new Error("The review server is not answering: is thumbctl review still running?");
  }
  const data = await answer.json().catch(() => ({}));
  if (!answer.ok) {
    const error = new Error((data.error && data.error.message) || `the server answered ${answer.status}`);
    error.status = answer.status;
    throw error;
  }
  return data;
}
