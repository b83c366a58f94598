/**
 * The README and the guides in docs/: every markdown link resolves inside the repository
 * (the file exists; a `#anchor` names a heading of that file, slugified as GitHub does),
 * nothing links outside it (no http:// or https:// link; such URLs may appear in code
 * blocks and code spans, as local-stack addresses or configuration values), every guide is
 * linked from the README, and the README stays a five-minute read (under 200 lines).
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const docsDir = join(root, "docs");
const guides = existsSync(docsDir)
  ? readdirSync(docsDir)
      .filter((f) => f.endsWith(".md"))
      .sort()
      .map((f) => join(docsDir, f))
  : [];
const files = [join(root, "README.md"), ...guides];
const rel = (file: string) => relative(root, file);

/** The text a reader sees as prose: fenced code blocks blanked (lines kept, for line numbers), inline code spans removed. */
function prose(markdown: string): string[] {
  let fence: string | undefined;
  return markdown.split("\n").map((line) => {
    const marker = /^\s{0,3}(`{3,}|~{3,})/.exec(line)?.[1];
    if (fence) {
      if (marker && marker[0] === fence[0] && marker.length >= fence.length && line.trim() === marker) fence = undefined;
      return "";
    }
    if (marker) {
      fence = marker;
      return "";
    }
    // Indented code (four spaces) is not used outside lists here, so only spans are stripped.
    return line.replace(/(`+)[\s\S]*?\1/g, "");
  });
}

interface Link {
  line: number;
  text: string;
  target: string;
}

/** Every inline link and image `[text](target "title")` and reference definition `[label]: target`. */
function links(markdown: string): Link[] {
  const found: Link[] = [];
  prose(markdown).forEach((line, i) => {
    for (const m of line.matchAll(/!?\[((?:[^[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)/g)) {
      found.push({ line: i + 1, text: m[1] ?? "", target: m[2] ?? "" });
    }
    const definition = /^\s{0,3}\[([^\]]+)\]:\s*<?(\S+?)>?(?:\s|$)/.exec(line);
    if (definition) found.push({ line: i + 1, text: definition[1] ?? "", target: definition[2] ?? "" });
  });
  return found;
}

/** URLs a renderer would turn into links without markdown link syntax: `<https://…>` and bare ones in prose. */
function autolinks(markdown: string): Link[] {
  const found: Link[] = [];
  prose(markdown).forEach((line, i) => {
    // Markdown links are checked on their own; blank them so their targets are not counted twice.
    const rest = line.replace(/!?\[((?:[^[\]]|\[[^\]]*\])*)\]\([^)]*\)/g, "$1");
    for (const m of rest.matchAll(/<?\b(https?:\/\/[^\s<>)]+)>?/gi)) found.push({ line: i + 1, text: m[0], target: m[1] ?? "" });
    for (const m of rest.matchAll(/(?<![\w/.@-])www\.[\w-]+\.[\w.-]+/gi)) found.push({ line: i + 1, text: m[0], target: m[0] });
  });
  return found;
}

/** GitHub's heading anchor: the heading's text, lowercased, punctuation but hyphens (and underscores) dropped, spaces to hyphens. */
function slugify(heading: string): string {
  const text = heading
    .replace(/!?\[((?:[^[\]]|\[[^\]]*\])*)\]\([^)]*\)/g, "$1") // a link shows its text
    .replace(/<[^>]+>/g, "") // inline HTML
    .replace(/[`*]/g, ""); // code and emphasis markers
  return text
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\s_-]/gu, "")
    .replace(/\s/g, "-");
}

/** Every heading's anchor in a markdown file, a repeated one numbered as GitHub numbers it (`-1`, `-2`, ...). */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const result = new Set<string>();
  for (const line of prose(markdown)) {
    const heading = /^\s{0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$/.exec(line)?.[1];
    if (heading === undefined) continue;
    const base = slugify(heading);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    result.add(n === 0 ? base : `${base}-${n}`);
  }
  return result;
}

const read = (file: string) => readFileSync(file, "utf8");

describe("the slug of a heading", () => {
  it("is GitHub's", () => {
    expect(slugify("A bill in the interface's eight fields")).toBe("a-bill-in-the-interfaces-eight-fields");
    expect(slugify("0. Deploy")).toBe("0-deploy");
    expect(slugify("OpenAPI and /docs")).toBe("openapi-and-docs");
    expect(slugify("Quotes, and checking a number before paying")).toBe("quotes-and-checking-a-number-before-paying");
    expect(slugify("The `PAYMENT-REQUIRED` header")).toBe("the-payment-required-header");
    expect(slugify("[The ledger](ledger.md) in production")).toBe("the-ledger-in-production");
  });

  it("ignores headings in code blocks and numbers repeats", () => {
    const md = "# Title\n\n```ini\n# not a heading\n```\n\n## Errors\n\n## Errors\n";
    expect([...anchors(md)]).toEqual(["title", "errors", "errors-1"]);
  });
});

describe("the link parser", () => {
  it("finds links in prose, not in code", () => {
    const md = "See [a](a.md#x) and ![img](p.png \"t\").\n\n`[no](no.md)`\n\n```\n[no](no.md)\n```\n\n[ref]: b.md\n";
    expect(links(md).map((l) => l.target)).toEqual(["a.md#x", "p.png", "b.md"]);
  });

  it("finds URLs a renderer would link by itself, not those in code", () => {
    const md = "Go to https://example.com or <http://a.b>.\n\n`https://vtpass.com`\n\n```\ncurl http://127.0.0.1:8080\n```\n";
    expect(autolinks(md).map((l) => l.target)).toEqual(["https://example.com", "http://a.b"]);
  });
});

describe("the README", () => {
  const readme = read(join(root, "README.md"));

  it("is under 200 lines", () => {
    const lines = readme.replace(/\n$/, "").split("\n").length;
    expect(lines, `README.md has ${lines} lines`).toBeLessThan(200);
  });

  it("links every guide in docs/", () => {
    expect(guides.length).toBeGreaterThan(0);
    const targets = new Set(links(readme).map((l) => l.target.split("#")[0]));
    const missing = guides.map((g) => relative(root, g)).filter((g) => !targets.has(g));
    expect(missing, "guides the README does not link").toEqual([]);
  });
});

describe.each(files.map((file) => [rel(file), file] as const))("%s", (_name, file) => {
  const markdown = read(file);
  const found = links(markdown);

  it("links nothing outside the repository", () => {
    const outside = [...found, ...autolinks(markdown)]
      .filter((l) => /^(https?:)?\/\//i.test(l.target) || /^www\./i.test(l.target))
      .map((l) => `${rel(file)}:${l.line} ${l.target}`);
    expect(outside).toEqual([]);
  });

  it("has only relative links that resolve, anchors included", () => {
    const broken: string[] = [];
    for (const { line, target } of found) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith("//")) {
        // mailto:, http: and the like: not a file of the repository.
        broken.push(`${rel(file)}:${line} ${target}: not a relative link`);
        continue;
      }
      const hash = target.indexOf("#");
      const path = decodeURIComponent(hash === -1 ? target : target.slice(0, hash));
      const anchor = hash === -1 ? undefined : decodeURIComponent(target.slice(hash + 1));
      if (path === "" && anchor === undefined) {
        broken.push(`${rel(file)}:${line} empty link`);
        continue;
      }
      const resolved = path === "" ? file : path.startsWith("/") ? join(root, path) : resolve(dirname(file), path);
      if (relative(root, resolved).startsWith("..")) {
        broken.push(`${rel(file)}:${line} ${target}: outside the repository`);
        continue;
      }
      if (!existsSync(resolved)) {
        broken.push(`${rel(file)}:${line} ${target}: no such file`);
        continue;
      }
      if (anchor !== undefined) {
        if (statSync(resolved).isDirectory() || !resolved.endsWith(".md")) {
          broken.push(`${rel(file)}:${line} ${target}: an anchor into a file that is not markdown`);
        } else if (!anchors(read(resolved)).has(anchor)) {
          broken.push(`${rel(file)}:${line} ${target}: no heading "#${anchor}" in ${rel(resolved)}`);
        }
      }
    }
    expect(broken).toEqual([]);
  });
});
