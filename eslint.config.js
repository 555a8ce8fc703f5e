// Lint with typed rules (typescript-eslint's type-checked configuration). In this code a dropped
// `await` is a lost write: floating and misused promises are errors, and so is a switch that
// misses a case of a union. Formatting is Prettier's (npm run format), not the linter's.
import tseslint from "typescript-eslint";

const promises = {
  "@typescript-eslint/no-floating-promises": "error",
  "@typescript-eslint/no-misused-promises": "error",
  "@typescript-eslint/await-thenable": "error",
  "@typescript-eslint/switch-exhaustiveness-check": ["error", { considerDefaultExhaustiveForUnions: true }],
  // `_name`: left out on purpose (a field dropped from a record, an argument a signature needs).
  "@typescript-eslint/no-unused-vars": [
    "error",
    { argsIgnorePattern: "^_", varsIgnorePattern: "^_", destructuredArrayIgnorePattern: "^_", caughtErrors: "none", ignoreRestSiblings: true },
  ],
};

export default tseslint.config(
  { ignores: ["node_modules/", ".wrangler/", "worker-configuration.d.ts", "bench/", "coverage/", "**/*.js", "**/*.mjs", "**/*.cjs"] },
  {
    files: ["**/*.ts"],
    extends: [tseslint.configs.recommendedTypeChecked],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: promises,
  },
  {
    // Tests and their fakes read JSON they wrote themselves, and stub async interfaces with
    // functions that need no await: the promise rules hold there, the `any` rules do not.
    files: ["test/**/*.ts"],
    rules: {
      "@typescript-eslint/no-unsafe-assignment": "off",
      "@typescript-eslint/no-unsafe-member-access": "off",
      "@typescript-eslint/no-unsafe-argument": "off",
      "@typescript-eslint/no-unsafe-call": "off",
      "@typescript-eslint/no-unsafe-return": "off",
      "@typescript-eslint/require-await": "off",
      // `(await res.json()) as T` reads as well as `res.json<T>()`.
      "@typescript-eslint/no-unnecessary-type-assertion": "off",
    },
  },
);
