(() => {
  const state = document.getElementById("state");
  if (!state || state.dataset.state !== "running") return;
  const source = state.dataset.source;
  const every = Number(state.dataset.every) || 3000;
  const poll = async () => {
    let html = null;
    try {
      const response = await fetch(source, {cache: "no-store"});
      if (response.ok) html = await response.text();
    } catch (error) {
      html = null;
    }
    if (html !== null) {
      const fresh = document.createElement("template");
      fresh.innerHTML = html;
      const now = fresh.content.getElementById("state");
      if (!now || now.dataset.state !== "running") {
        location.reload();
        return;
      }
      const open = new Set([...document.querySelectorAll("details[open][id]")].map((d) => d.id));
      for (const part of fresh.content.querySelectorAll("[data-live]")) {
        const old = document.getElementById(part.id);
        if (old) old.replaceWith(part);
      }
      for (const id of open) {
        const d = document.getElementById(id);
        if (d) d.open = true;
      }
    }
    setTimeout(poll, every);
  };
  setTimeout(poll, every);
})();
