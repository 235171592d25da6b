/**
 * The object without its `undefined` properties: parsed config (where unset keys are
 * `undefined`) spread into options typed with `exactOptionalPropertyTypes`.
 */
export function definedOnly<T extends object>(object: T): { [K in keyof T]?: Exclude<T[K], undefined> } {
  return Object.fromEntries(Object.entries(object).filter(([, value]) => value !== undefined)) as {
    [K in keyof T]?: Exclude<T[K], undefined>;
  };
}
