/**
 * `@mrtr/core/options`: option checking as the guard does it, for stores and adapters — an unknown option is a
 * `TypeError` naming the closest known one; a wrong type a labelled `TypeError`, out of range a `RangeError`.
 */
export {
  boolOption,
  fnOption,
  intOption,
  isObject,
  oneOfOption,
  type OptionNames,
  optionsObject,
  rejectUnknownOptions,
  stringOption,
} from './util/validate.js';
