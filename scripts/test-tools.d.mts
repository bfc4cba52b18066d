export declare const TOOLS_DIR: string;
export declare const TOOLS_BIN: string;
export declare function testNode(major: number): string | null;
export declare function ensureTestTools(options?: { quiet?: boolean }): void;
