export declare const OUT_DIR: string;
export declare function sourceHash(): string;
export declare function isFresh(): boolean;
export declare function buildServer(): Promise<number>;
