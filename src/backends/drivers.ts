// Every driver, by the name POD_DRIVER, VM_DRIVER and BACKENDS' `driver` give it: adding one is
// a folder under src/backends/ and a line here.
import type { DriverModule } from "./driver-module.ts";
import { httpDriver } from "./http.ts";
import { ec2Driver } from "./ec2/index.ts";
import { hetznerDriver } from "./hetzner/index.ts";
import { kubernetesDriver, kubevirtDriver } from "./kubernetes/index.ts";

export const DRIVER_MODULES = {
  http: httpDriver,
  kubernetes: kubernetesDriver,
  kubevirt: kubevirtDriver,
  hetzner: hetznerDriver,
  ec2: ec2Driver,
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- each driver has a settings type of its own
} as const satisfies Record<string, DriverModule<any>>;

export type DriverName = keyof typeof DRIVER_MODULES;
export const DRIVERS = Object.keys(DRIVER_MODULES) as [DriverName, ...DriverName[]];

/** The module of a driver named in a validated configuration. */
export function driverModule(name: string): DriverModule {
  if (!Object.hasOwn(DRIVER_MODULES, name)) throw new Error(`no driver ${name}`);
  return DRIVER_MODULES[name as DriverName];
}
