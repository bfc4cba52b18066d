export declare const TOOLS_DIR: string;
export declare const TOOLS_BIN: string;
export declare function testNode(major: number): string | null;
export declare function ensureTestTools(options?: { quiet?: boolean }): void;
export declare const CLAUDE_BIN: string;
export declare const CODEX_BIN: string;
